"""What the REST API, ``%workers attach`` and a saved notebook show of a run: its state with a checked status.

Used by the Jupyter server extension and the kernel. Imports no TensorFlow.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Literal, cast, overload

from nbworkers.magics.run.core.state import DONE_STATES
from nbworkers.magics.rundir.layout import list_run_dirs, read_state, state_mtime, stop_requested
from nbworkers.magics.rundir.liveness import LOST, effective_status, kernel_alive, leftover_processes
from nbworkers.magics.shapes import ClusterSnapshot, RunRow


@overload
def describe(run_dir: Path, state: dict[str, Any] | None = None, *, full: Literal[True]) -> ClusterSnapshot | None: ...
@overload
def describe(run_dir: Path, state: dict[str, Any] | None = None, full: Literal[False] = False) -> RunRow | None: ...


def describe(run_dir: Path, state: dict[str, Any] | None = None, full: bool = False) -> ClusterSnapshot | RunRow | None:
    """The run as shown from outside its kernel.

    ``full`` False: the summary row (name, kernel, backend, workers, status, started, restarts, ...);
    True: the whole state (per-worker status, latest metrics, log tails) plus the liveness fields.
    """
    state = read_state(run_dir) if state is None else state
    if state is None:
        return None
    alive = kernel_alive(state)
    status = effective_status(state, alive)
    workers = [w for w in state.get("workers") or [] if isinstance(w, dict)]
    mtime = state_mtime(run_dir)
    liveness = {
        "status": status,
        "recorded_status": state.get("status"),
        "kernel_alive": alive,
        "processes_alive": len(leftover_processes(state, run_dir)) if status not in DONE_STATES else 0,
        "state_age": None if mtime is None else max(0.0, time.time() - mtime),
        "stop_requested": stop_requested(run_dir),
    }
    if status == LOST and not state.get("error"):
        liveness["error"] = f"its kernel (pid {state.get('kernel_pid')}) died; the run was not reaped yet"
    if full:
        data = dict(state)
        data.update(liveness)
        data["name"] = run_dir.name
        data["workers"] = workers
        data.setdefault("error", "")
        return cast(ClusterSnapshot, data)
    return cast(RunRow, {
        "name": run_dir.name,
        "kernel": {"id": state.get("kernel_id") or "", "pid": state.get("kernel_pid")},
        "backend": state.get("backend", ""),
        "workers": len(workers),
        "worker_status": [w.get("status") for w in workers],
        "started": state.get("started"),
        "ended": state.get("ended"),
        "wall_time": state.get("wall_time"),
        "restarts": state.get("restarts", 0),
        "error": liveness.pop("error", None) or state.get("error") or "",
        "run_dir": str(run_dir),
        **liveness,
    })


def list_runs(root: str | os.PathLike | None = None) -> list[RunRow]:
    """Every run under the run root, newest first, as ``describe`` shows it."""
    runs = []
    for run_dir in list_run_dirs(root):
        row = describe(run_dir)
        if row is not None:
            runs.append(row)
    runs.sort(key=lambda r: r.get("started") or 0.0, reverse=True)
    return runs
