"""What the REST API, ``%workers attach`` and a saved notebook show of a run: its state with a checked status.

Used by the Jupyter server extension and the kernel. Imports no TensorFlow.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Literal, cast, overload

from nbworkers.magics.rundir.layout import list_run_dirs, read_state, restart_requested, state_mtime, stop_requested
from nbworkers.magics.rundir.liveness import LOST, effective_status, kernel_alive, leftover_processes
from nbworkers.magics.shapes import ClusterSnapshot, RunProgress, RunRow
from nbworkers.protocol.statuses import ENDED, KERNEL_GONE, RECORDED_ENDS, WorkerStatus


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def progress_of(workers: list[dict[str, Any]]) -> RunProgress | None:
    """The run's progress as its chief (the first process that reported a step or an epoch) sees it.

    ``fraction`` is the share of the training done (0..1) when the totals are known: epochs and steps per
    epoch, or the steps alone; else None.
    """
    for worker in workers:
        epoch, step = _number(worker.get("epoch")), _number(worker.get("step"))
        if epoch is None and step is None:
            continue
        epochs_total, steps_total = _number(worker.get("epochs_total")), _number(worker.get("steps_total"))
        fraction = None
        if steps_total and step is not None:
            if epochs_total and epoch:
                fraction = ((epoch - 1) * steps_total + step) / (epochs_total * steps_total)
            elif not epochs_total:
                fraction = step / steps_total
        elif epochs_total and epoch:
            fraction = epoch / epochs_total
        return {"epoch": epoch, "epochs_total": epochs_total, "step": step, "steps_total": steps_total,
                "fraction": None if fraction is None else max(0.0, min(1.0, fraction))}
    return None


def _steps_per_sec(workers: list[dict[str, Any]]) -> float | None:
    for worker in workers:
        rate = worker.get("steps_per_sec")
        if isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate):
            return float(rate)  # finite only: the listing is strict JSON (a browser's JSON.parse refuses NaN)
    return None


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
        "processes_alive": len(leftover_processes(state, run_dir)) if status not in RECORDED_ENDS else 0,
        "state_age": None if mtime is None else max(0.0, time.time() - mtime),
        "stop_requested": stop_requested(run_dir),
    }
    if status == LOST and not state.get("error"):
        liveness["error"] = KERNEL_GONE  # its workers are being stopped; the reaper records the same words
    if status == LOST:  # and its workers read as the reaper records them (stopped), not as the dead kernel left them
        workers = [w if w.get("status") in ENDED else {**w, "status": WorkerStatus.STOPPED.value} for w in workers]
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
        "restart_requested": restart_requested(run_dir),
        "detached": bool(state.get("detached")),
        "workers_alive": 0 if status in ENDED else sum(
            1 for w in workers if w.get("status") not in ENDED),
        "nodes": sorted({str(w["host"]) for w in workers if w.get("host")}),
        "progress": progress_of(workers),
        "steps_per_sec": _steps_per_sec(workers),
        "session": state.get("session") if isinstance(state.get("session"), dict) else None,
        "isolation": state.get("isolation") if isinstance(state.get("isolation"), dict) else None,
        "cell_id": str(state.get("cell_id") or ""),
        "notebook": str(state.get("notebook") or ""),
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
