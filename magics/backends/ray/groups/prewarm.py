"""Prewarm on Ray: with ``RAY_ADDRESS`` set, ``%load_ext nbworkers`` connects to that cluster and starts this
kernel's zygote and a spare worker host (``spares.py``) on every live node with CPUs (``node_zygotes.py``), in the
background, as it starts the local zygote (``zygote_prewarm``): the first ``%%worker --backend ray`` cell then
forks its workers there instead of importing TensorFlow on each node, through hosts already running, and finds Ray
connected.

The zygotes are those a run with the kernel's environment uses (each node's interpreter, the import-time
variables the kernel forwards): a cell whose ``--env`` or ``--python`` changes them gets its own at its first run,
as locally. Nothing is said when it fails (no Ray installed, the cluster does not answer): the first run
connects and says what is wrong. Turned off with the local prewarm (``NBWORKERS_ZYGOTE_PREWARM=0``) or zygotes.
"""

from __future__ import annotations

import importlib.util
import threading
from typing import TYPE_CHECKING, Any

from nbworkers.magics.settings import settings as current_settings

if TYPE_CHECKING:
    from nbworkers.magics.backends.ray.backend import RayBackend


def prewarm_nodes(address: str) -> threading.Thread | None:
    """Start the nodes' zygotes of the Ray cluster at ``address`` in a thread of their own (None: off)."""
    config = current_settings()
    if not (address and config.zygote and config.zygote_prewarm) or importlib.util.find_spec("ray") is None:
        return None
    thread = threading.Thread(target=_prewarm, args=(address,), name="nbworkers-ray-prewarm", daemon=True)
    thread.start()
    return thread


def _prewarm(address: str) -> None:
    from nbworkers.magics.backends.ray.backend import RayBackend

    try:
        backend = RayBackend(address=address)
        prewarm_on(backend.connect(), backend)
    except Exception:  # the first run connects again and says why it cannot
        pass


def prewarm_on(ray: Any, backend: RayBackend) -> list[str]:
    """Ask every live node with CPUs for the zygote a run of ``backend`` with the kernel's environment forks from
    (the key ``RayBackend._ask_zygotes`` asks for); the nodes asked."""
    from nbworkers.magics.backends.ray.groups.spares import make_spares
    from nbworkers.magics.backends.ray.node_zygotes import node_zygotes

    nodes = nodes_with_cpus(ray.nodes())
    node_zygotes().ask(ray, nodes, *backend.zygote_request())
    make_spares(ray, nodes, backend.settings)  # a worker host ready on each node for the first run's new group
    return nodes


def nodes_with_cpus(nodes: list[dict[str, Any]]) -> list[str]:
    """The ids of the live nodes a worker can be placed on (``ray.nodes()``): a head without CPUs has no zygote."""
    return [node["NodeID"] for node in nodes if node.get("Alive") and (node.get("Resources") or {}).get("CPU", 0) > 0]
