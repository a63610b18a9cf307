"""Reaping the leftovers of dead kernels: runs whose state says not done but whose kernel died.

Reaping kills what is left of such a run (TERM, grace, KILL — only processes that are the run's own:
``liveness.leftover_processes``), removes a detached session's client file (its supervisor is gone), and records
its end (``end_of``): stopped because its kernel restarted or died (``KERNEL_GONE``, what every view shows), or
failed when a worker had failed before. The kernel scans its run root in the background when the extension loads
(``scan_at_load``), which also removes the Unix socket files that dead kernels and supervisors left
(``sockets.sweep_stale``) and their shared-memory files and fall-back folders (``session_shm.sweep_stale``); the
server extension and tests call ``reap_leftovers``. Runs of live kernels and of other machines are never touched.

The rest of what is known about runs from outside their kernel lives beside this module: the layout and the
files (``rundir``), liveness (``liveness``), the REST rows (``run_listing``), stopping (``run_stop``), read-only
handles (``attach``), and processes left under a run root (``strays``). Imports no TensorFlow.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from nbworkers.magics.run import sockets
from nbworkers.magics.rundir.layout import list_run_dirs, read_state, remove_session_client, run_root
from nbworkers.magics.rundir.liveness import is_foreign, kernel_alive, leftover_processes
from nbworkers.magics.rundir.stop import mark_ended
from nbworkers.procs.kill import KILL_GRACE, stop_processes
from nbworkers.protocol import session_shm
from nbworkers.protocol.statuses import KERNEL_GONE, RECORDED_ENDS, ClusterStatus, WorkerStatus

log = logging.getLogger("nbworkers")


def find_leftovers(root: str | os.PathLike | None = None) -> list[Path]:
    """Run directories whose state says not done but whose kernel is dead."""
    found = []
    for run_dir in list_run_dirs(root):
        state = read_state(run_dir)
        if state is None or state.get("status") in RECORDED_ENDS or is_foreign(state):
            continue
        if not kernel_alive(state):
            found.append(run_dir)
    return found


def end_of(state: dict[str, Any]) -> tuple[ClusterStatus, str, WorkerStatus]:
    """How a run whose kernel went away ended: failed when a worker had failed (or the run had an error), its
    error kept and why it did not go on; otherwise stopped because its kernel restarted or died (not a failure
    of the user's code: running the cell again starts it in the new kernel)."""
    workers = [w for w in state.get("workers") or [] if isinstance(w, dict)]
    if state.get("error") or any(w.get("status") == WorkerStatus.FAILED for w in workers):
        return ClusterStatus.FAILED, f"a worker had failed; {KERNEL_GONE}", WorkerStatus.STOPPED
    return ClusterStatus.STOPPED, KERNEL_GONE, WorkerStatus.STOPPED


def reap(run_dir: Path, kill_grace: float = KILL_GRACE) -> dict[str, Any] | None:
    """Kill what is left of a dead kernel's run and record its end (``end_of``)."""
    state = read_state(run_dir)
    if state is None or state.get("status") in RECORDED_ENDS or kernel_alive(state):
        return state
    stop_processes(leftover_processes(state, run_dir), kill_grace)
    remove_session_client(run_dir)  # a detached session's, naming a socket nobody answers on now
    return mark_ended(run_dir, *end_of(state))


def reap_leftovers(root: str | os.PathLike | None = None, kill_grace: float = KILL_GRACE) -> list[str]:
    """Reap every leftover under the run root; returns their names."""
    reaped = []
    for run_dir in find_leftovers(root):
        try:
            reap(run_dir, kill_grace)
            reaped.append(run_dir.name)
        except OSError as error:
            log.warning("nbworkers: could not reap the leftovers of %s: %s", run_dir, error)
    return reaped


def reaped_text(names: list[str]) -> str:
    """What the kernel says of the runs it reaped at load, in the words every view uses for them (KERNEL_GONE)."""
    if len(names) == 1:
        return f"run {names[0]} {KERNEL_GONE}; `%workers attach {names[0]}` shows what it did"
    return (f"runs {', '.join(names)} {KERNEL_GONE.replace('its kernel', 'their kernels', 1)}; `%workers attach NAME` "
            "shows what one did")


def scan_at_load(root: str | os.PathLike | None = None) -> threading.Thread:
    """Reap the leftovers of dead kernels in the background (called when the extension loads)."""
    root = run_root(root)

    def scan() -> None:
        try:
            names = reap_leftovers(root)
            sockets.sweep_stale()
            session_shm.sweep_stale()
        except Exception as error:  # a scan must never break the kernel
            log.warning("nbworkers: leftover scan of %s failed: %s", root, error)
            return
        if names:
            log.warning("nbworkers: %s", reaped_text(names))

    thread = threading.Thread(target=scan, name="nbworkers-leftover-scan", daemon=True)
    thread.start()
    return thread
