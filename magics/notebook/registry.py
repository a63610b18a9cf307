"""The clusters this kernel started, by name."""

from __future__ import annotations

import atexit
import threading

from nbworkers.magics.run.cluster import Cluster
from nbworkers.magics.sessions.session import Session

Handle = Cluster | Session  # a plain run's handle, or a session's (which holds its Cluster)

_clusters: dict[str, Handle] = {}
_lock = threading.Lock()


def add(cluster: Handle) -> None:
    with _lock:
        _clusters[cluster.name] = cluster


def get(name: str) -> Handle:
    with _lock:
        if name not in _clusters:
            known = ", ".join(sorted(_clusters)) or "none yet"
            raise KeyError(f"no cluster named {name!r} in this kernel (known: {known}); `%workers` lists them")
        return _clusters[name]


def all_clusters() -> list[Handle]:
    with _lock:
        return list(_clusters.values())


def names() -> set[str]:
    with _lock:
        return set(_clusters)


def running() -> list[Handle]:
    return [c for c in all_clusters() if not c.done]


@atexit.register
def _stop_all_at_exit() -> None:
    """A kernel that shuts down cleanly stops its clusters; one that dies hard is covered by the hosts. A detached
    run (``%%worker --detach``) outlives its kernel: left running."""
    ending = [cluster for cluster in running() if not getattr(cluster, "detached", False)]
    for cluster in ending:
        cluster.stop()
    for cluster in ending:
        cluster.wait(timeout=cluster.settings.stop_grace + cluster.settings.exit_stop_margin)
    from nbworkers.magics.backends.registry import release_idle

    release_idle()  # what the backends keep between runs (Ray's idle worker groups), those just given back included
