"""JAX's runtime, as a zygote asks about it: has a backend (CPU/GPU client, its thread pools, perhaps CUDA) been
initialised in this process? A fork after that may deadlock the child (JAX warns at ``os.fork``: jax-ml/jax#1805),
so a JAX zygote imports JAX and Keras on JAX and never lists a device. Group ``jax/backends`` in ``internals``.
Nothing here imports JAX: a process that has not imported it has no backend.

``store()`` (group ``jax_backends.store``): the coordination service's key-value store, where the workers of a
stopped fit agree on the step they leave at (``distlib/frameworks/jax_stop.py``).

``leave_without_shutdown()`` (group ``jax_backends.leave``): a stopped or failed worker leaves without JAX's own
``atexit`` functions, whose distributed shutdown waits at a barrier for every process: a peer still blocked in a
collective with this one never reaches it, and waits itself until this process's sockets close.
"""

from __future__ import annotations

import atexit
import sys
from typing import Any

from nbworkers.distlib.compat import internals

BRIDGE = "jax._src.xla_bridge"


def missing() -> list[str]:
    """The names of the check's symbols this JAX lacks (empty: ``started()`` can be trusted)."""
    return [entry.name for entry, _ in internals.missing("jax/backends")]


def started() -> bool:
    """Has JAX initialised a backend here? Never initialises one and never imports JAX."""
    bridge = sys.modules.get(BRIDGE)
    if bridge is None:
        return False
    initialised = getattr(bridge, "backends_are_initialized", None)  # gone: missing() says so, forks are refused
    return bool(initialised()) if initialised is not None else False


def leave_without_shutdown() -> None:
    """Unregister JAX's ``atexit`` shutdown (nothing where JAX is not imported; a warning where its symbols moved:
    the worker then waits out ``bootstrap.ATEXIT_TIMEOUT_S`` or its host's SIGKILL as before)."""
    if "jax" not in sys.modules or not internals.available("jax/backends.leave", "a stopped JAX worker waits at "
                                                           "JAX's shutdown barrier"):
        return
    for module_name, name in (("jax._src.api", "clean_up"), ("jax._src.dispatch", "wait_for_tokens")):
        function = getattr(sys.modules.get(module_name), name, None)
        if function is not None:
            atexit.unregister(function)


def store() -> Any | None:
    """JAX's distributed client (its coordination service's key-value store: ``key_value_set``,
    ``blocking_key_value_get``), or None when JAX's processes are not joined or its symbols moved (warned once)."""
    if "jax" not in sys.modules or not internals.available("jax/backends.store", "a stopped JAX fit ends each "
                                                           "worker where its stop found it"):
        return None
    state = getattr(sys.modules.get("jax._src.distributed"), "global_state", None)
    return getattr(state, "client", None)
