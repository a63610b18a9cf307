"""Stopping a run from outside the kernel that started it (the REST API's DELETE, ``AttachedCluster.stop``).

First the ``stop-requested`` file, which the kernel's supervisor thread obeys even while the kernel is busy; then,
if processes of the run are still there after a grace period (or at once when its kernel is dead), TERM and KILL
them directly (``process_kill``; only processes that are the run's own, ``liveness.leftover_processes``); a run
whose kernel is dead is recorded as ended in its state file (nobody else will).

Blocking: called from a worker thread, never an event loop. Imports no TensorFlow.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from nbworkers.magics.rundir.layout import read_state, request_stop, write_state
from nbworkers.magics.rundir.listing import describe
from nbworkers.magics.rundir.liveness import is_foreign, kernel_alive, leftover_processes
from nbworkers.magics.settings import settings as current_settings
from nbworkers.procs.kill import KILL_GRACE, stop_processes
from nbworkers.protocol.statuses import RECORDED_ENDS, ClusterStatus, WorkerStatus

POLL_INTERVAL = 0.1  # seconds between checks while waiting for a run to stop


def mark_ended(run_dir: Path, status: ClusterStatus, error: str, worker_status: WorkerStatus) -> dict[str, Any] | None:
    """Record the end of a run whose kernel is gone (nobody else will)."""
    state = read_state(run_dir)
    if state is None or state.get("status") in RECORDED_ENDS:
        return state
    now = time.time()
    state["status"] = status.value
    state["error"] = state.get("error") or error
    state["ended"] = now
    if isinstance(state.get("started"), (int, float)):
        state["wall_time"] = now - state["started"]
    state["reaped"] = now
    for worker in state.get("workers") or []:
        if isinstance(worker, dict) and worker.get("status") not in RECORDED_ENDS:
            worker["status"] = worker_status.value
            worker["detail"] = worker.get("detail") or error
    write_state(run_dir, state)
    return state


def stop_run(run_dir: Path, stop_timeout: float | None = None, kill_grace: float = KILL_GRACE,
             poll_interval: float = POLL_INTERVAL) -> dict[str, Any]:
    """Stop a run and wait for it to be gone.

    1. write ``stop-requested``: a live kernel's supervisor stops the group (INT, TERM, grace, KILL) and records it;
    2. after ``stop_timeout`` (default: the stop grace + a margin), or at once when the kernel is dead,
       TERM then KILL whatever is left of the host and worker process groups;
    3. when the kernel is dead, record the run as stopped in its state file.
    Returns the run as ``describe(..., full=False)`` shows it, plus ``killed``: processes killed directly.
    """
    if stop_timeout is None:
        stop_timeout = current_settings().stop_grace + current_settings().stop_wait_margin
    state = read_state(run_dir) or {}
    killed = 0
    if state.get("status") not in RECORDED_ENDS and not is_foreign(state):
        request_stop(run_dir)
        deadline = time.monotonic() + stop_timeout
        while time.monotonic() < deadline and kernel_alive(state):
            current = read_state(run_dir) or state
            if current.get("status") in RECORDED_ENDS and not leftover_processes(current, run_dir):
                break
            time.sleep(poll_interval)
        state = read_state(run_dir) or state
        killed = stop_processes(leftover_processes(state, run_dir), kill_grace)
        if kernel_alive(state):
            # let the supervisor notice the exits and record them
            settle = time.monotonic() + current_settings().stop_settle_timeout
            while time.monotonic() < settle and (read_state(run_dir) or {}).get("status") not in RECORDED_ENDS:
                time.sleep(poll_interval)
        else:
            mark_ended(run_dir, ClusterStatus.STOPPED, "stopped by request after its kernel died", WorkerStatus.STOPPED)
    result: dict[str, Any] = dict(describe(run_dir) or {"name": run_dir.name})
    result["killed"] = killed
    return result
