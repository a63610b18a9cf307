"""From a run's snapshot to the ``RunFailed`` a blocking wait raises: one short message, the worker's own frames.

``run_failure(snapshot)`` is the exception (or None when the run finished or the user stopped it);
``failure_message(snapshot)`` its text. Both take a ``ClusterSnapshot`` (magics/shapes.py: ``ClusterState.snapshot()``,
or a session cell's), so the waits of ``%%worker --block``, ``%workers wait`` and session cells
share them. The text never holds nbworkers' own kernel-side frames: ``RunFailed`` renders as this text alone
in IPython (``_render_traceback_``), as ipyparallel's remote errors do.
"""

from __future__ import annotations

from nbworkers.magics.errors import RunFailed
from nbworkers.magics.shapes import ERROR_BELOW_KEY, ClusterSnapshot, WorkerSnapshot
from nbworkers.magics.views.words import failed_workers
from nbworkers.protocol.statuses import ClusterStatus

TRACEBACK_MAX_LINES = 30  # of one worker's traceback: its first line, then its last frames


def worker_label(worker: WorkerSnapshot) -> str:
    """``worker 1``, or with roles ``worker 0 (chief)``."""
    role = worker.get("role") or "worker"
    label = f"worker {worker.get('index', '?')}"
    return label if role == "worker" else f"{label} ({role})"


def last_traceback(lines: list[str] | None, max_lines: int = TRACEBACK_MAX_LINES) -> list[str]:
    """The last ``Traceback (most recent call last)`` in a log tail, to its end; [] when there is none.

    A long one keeps its first line and its last frames (the user's cell is at the bottom: the bootstrap cuts
    its own frames off)."""
    lines = list(lines or [])
    start = next((i for i in range(len(lines) - 1, -1, -1) if "Traceback (most recent call last)" in lines[i]), None)
    if start is None:
        return []
    block = lines[start:]
    if len(block) > max_lines:
        cut = len(block) - (max_lines - 1)
        block = [block[0], f"  ... ({cut} lines cut; the whole log has them)"] + block[-(max_lines - 2):]
    return block


def failure_message(snapshot: ClusterSnapshot, *, timed_out_after: float | None = None, what: str = "run",
                    logs_hint: str = "") -> str:
    """The text of a failed run: what failed, each distinct worker traceback once, where the full logs are.

    ``timed_out_after``: the wait gave up after that many seconds while the run goes on.
    ``logs_hint``: how to see a worker's whole log (default ``%workers logs NAME -w I``).
    """
    name = snapshot.get("name") or "?"
    if timed_out_after is not None:
        status = snapshot.get("status") or ClusterStatus.RUNNING.value
        return (f"{what} {name!r} is still {status} after {timed_out_after:g} s of "
                f"waiting; it keeps running (`%workers stop {name}` stops it, `%workers wait {name}` waits again).")
    error = (snapshot.get("error") or "").strip().splitlines()
    head = f"{what} {name!r} failed" + (f": {error[0]}" if error else "")
    lines = [head]
    groups: dict[tuple[str, ...], list[WorkerSnapshot]] = {}
    for worker in failed_workers(snapshot):
        groups.setdefault(tuple(last_traceback(worker.get("log_tail"))), []).append(worker)
    for traceback_lines, workers in groups.items():
        labels = ", ".join(worker_label(w) for w in workers)
        if traceback_lines:
            lines.append(f"--- {labels}:" if len(workers) == 1 else f"--- {labels} (the same traceback):")
            lines.extend(traceback_lines)
        else:
            codes = ", ".join(str(w.get("exit_code")) for w in workers)
            lines.append(f"--- {labels}: no Python traceback in the log (exit code {codes})")
    for worker in failed_workers(snapshot)[:4]:
        if worker.get("log_path"):
            hint = logs_hint or f"`%workers logs {name} -w {worker.get('index')}`"
            lines.append(f"{worker_label(worker).capitalize()}'s full log: {worker['log_path']} ({hint})")
    return "\n".join(lines)


def run_failure(snapshot: ClusterSnapshot, *, ended: bool = True, waited: float | None = None,
                what: str = "run", logs_hint: str = "") -> RunFailed | None:
    """The ``RunFailed`` for a run that ended failed (or, ``ended=False``, a wait that gave up after
    ``waited`` seconds); None for a finished run or one the user stopped."""
    name = snapshot.get("name") or ""
    if not ended:
        message = failure_message(snapshot, timed_out_after=waited or 0.0, what=what)
        return RunFailed(message, name=name, status="timeout")
    if snapshot.get("status") != ClusterStatus.FAILED:
        return None
    indices = tuple(int(w["index"]) for w in failed_workers(snapshot) if isinstance(w.get("index"), int))
    return RunFailed(failure_message(snapshot, what=what, logs_hint=logs_hint), name=name, workers=indices,
                     status=ClusterStatus.FAILED.value)


def mark_error_below(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot a summary shows above a raised ``RunFailed``: it leaves the tracebacks to the exception."""
    if snapshot.get("status") == ClusterStatus.FAILED:
        snapshot = snapshot.copy()
        snapshot[ERROR_BELOW_KEY] = True
    return snapshot
