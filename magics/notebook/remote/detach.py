"""``%%worker --detach``: the run in a supervisor process of its own (run/detach/supervisor.py), this kernel a client.

The kernel keeps no process of the run: it registers a ``DetachedCluster`` (attach.py: the live widget, refreshed
from the run's state file; Stop and Restart through its request files) on the run directory, so that
``%workers``, ``%workers stop/logs/wait NAME``, ``nbworkers.get_cluster(NAME)`` and the REST API work on it as on
any run, from this kernel or from any later one (``%workers attach NAME``).
"""

from __future__ import annotations

import sys
from typing import Any

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.notebook import registry
from nbworkers.magics.notebook.remote.attach import AttachedCluster, DetachedCluster, attach
from nbworkers.magics.notebook.remote.attach import workers_attach as attach_read_only
from nbworkers.magics.notebook.remote.detached_session import detached_session
from nbworkers.magics.run.detach.start import start_detached
from nbworkers.magics.rundir.layout import RunNotFound
from nbworkers.magics.settings import settings


def run_detached(spec: LaunchSpec, block: bool = False) -> DetachedCluster | None:
    """Start ``spec`` detached; its handle (registered), or None after ``block`` waited for its end."""
    run_dir = start_detached(spec, settings())
    cluster = DetachedCluster(run_dir)
    registry.add(cluster)  # type: ignore[arg-type]  # duck-typed like a Cluster
    if not block:
        return cluster
    cluster.show()  # the live view, then its final summary
    try:
        cluster.wait()
    except KeyboardInterrupt:
        print(f"Stopped waiting; detached cluster {cluster.name!r} is still running. "
              f"`%workers stop {cluster.name}` stops it.", file=sys.stderr)
    return None


def detached_run(name: str) -> AttachedCluster | None:
    """The detached run ``name`` (registered in this kernel from now on), or None if there is no such run; a
    detached session's handle runs cells in it (detached_session.py)."""
    session = detached_session(name)
    if session is not None:
        return session
    try:
        cluster = attach(name)
    except (RunNotFound, LaunchError):  # LaunchError: an unsafe run root
        return None
    if not cluster.detached:
        return None
    registry.add(cluster)  # type: ignore[arg-type]  # duck-typed like a Cluster
    return cluster


def workers_attach(name: str | None) -> Any:
    """``%workers attach NAME``: this kernel's own cluster of that name, a detached session's handle (its cells,
    pull, push), else attach.py's (a detached run's controllable handle, any other run's read-only one)."""
    if name and name not in registry.names():
        session = detached_session(name)
        if session is not None:
            return session
    return attach_read_only(name)
