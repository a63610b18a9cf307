"""What the kernel knows about a cluster and its workers, built from relay messages and process exits.

``ClusterState.snapshot()`` is the one plain, JSON-able picture of a run that every view reads: the live
text/HTML output, the widget, ``%workers``, the state file the server extension serves. Its shape is declared
in ``magics/shapes.py`` (``ClusterSnapshot``, ``WorkerSnapshot``); statuses are ``protocol/statuses.py``'s.

Plain data with no decisions: every status change is the supervisor's (``supervisor.py``), and no method here reads
the clock for a decision. ``time.time`` is only the default of ``started`` and of ``snapshot(now)``, the views'
picture of a run built by a shell.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nbworkers.magics.run.core.logtail import LogTail
from nbworkers.magics.shapes import ClusterSnapshot, RestartEntry, WorkerSnapshot
from nbworkers.protocol.statuses import RECORDED_ENDS, ClusterStatus, WorkerStatus

CLUSTER_STATES = tuple(status.value for status in ClusterStatus)


@dataclass
class WorkerState:
    index: int
    role: str = "worker"
    role_index: int = 0
    host: str = ""
    pid: int | None = None
    status: WorkerStatus = WorkerStatus.STARTING
    detail: str = ""
    exit_code: int | None = None
    epoch: int | None = None
    epochs_total: int | None = None
    step: int | None = None
    steps_total: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    steps_per_sec: float | None = None
    restarts: int = 0
    log_path: str = ""
    log_tail: LogTail = field(default_factory=LogTail)
    log_hidden: int = 0  # TensorFlow C++ start-up lines kept out of the tail (magics/run/noise.py); the file has them
    # (global_step, ((metric, value), ...)): tuples of numbers and strings, which the garbage collector stops
    # tracking; a dict inside kept every entry tracked (64 workers x 2000: full collections paused the kernel)
    history: deque[tuple[int, tuple[tuple[str, float], ...]]] = field(default_factory=lambda: deque(maxlen=2000))
    _rate_anchor: tuple[float, int] | None = None

    def apply_metrics(self, content: dict[str, Any], now: float | None = None) -> None:
        """A worker's metrics report: progress counters, values, the step rate and the chart's history. The time
        of the report is the worker's own ``t``, else ``now`` (wall time it arrived; None: the rate is not
        measured). The worker's status is the supervisor's to change, not this report's."""
        when = content.get("t") or now
        for name in ("epoch", "epochs_total", "step", "steps_total"):
            if content.get(name) is not None:
                setattr(self, name, content[name])
        self.metrics.update(content.get("metrics") or {})
        # the rate is taken over the global step (epochs x steps_total + step): the per-epoch step restarts
        # every epoch, which would make a rate across an epoch's end wrong or never measured
        step = self.global_step() if content.get("step") is not None else None
        if step is not None and when is not None:
            if self._rate_anchor is None or step < self._rate_anchor[1]:
                self._rate_anchor = (when, step)
            elif when - self._rate_anchor[0] >= 1.0:
                self.steps_per_sec = (step - self._rate_anchor[1]) / (when - self._rate_anchor[0])
                self._rate_anchor = (when, step)
        if content.get("metrics"):
            self.history.append((self.global_step(), tuple(content["metrics"].items())))

    def global_step(self) -> int:
        """A monotone x for charts: steps across epochs when the step restarts every epoch.

        ``epoch`` and ``step`` are 1-based (distlib/reporting.py), so step s of epoch e is
        ``(e - 1) * steps_total + s``; reports that name only the epoch are placed at the epoch number.
        """
        step = self.step or 0
        if self.epoch is not None and self.steps_total:
            return max(self.epoch - 1, 0) * self.steps_total + step
        if self.epoch is not None and self.step is None:
            return self.epoch
        return step

    def apply_status(self, state: WorkerStatus, detail: str = "") -> None:
        """A worker's own status message; a new state without a detail clears the old state's detail."""
        if detail or state != self.status:
            self.detail = detail or ""
        self.status = state

    def snapshot(self) -> WorkerSnapshot:
        return {
            "index": self.index,
            "role": self.role,
            "role_index": self.role_index,
            "host": self.host,
            "pid": self.pid,
            "status": str(self.status),  # a plain string: the JSON, the views and repr() see "running"
            "detail": self.detail,
            "exit_code": self.exit_code,
            "epoch": self.epoch,
            "epochs_total": self.epochs_total,
            "step": self.step,
            "steps_total": self.steps_total,
            "metrics": dict(self.metrics),
            "steps_per_sec": self.steps_per_sec,
            "restarts": self.restarts,
            "log_path": self.log_path,
            "log_tail": self.log_tail.lines(),
            "log_total": self.log_tail.total,  # complete lines seen so far (the tail's last one may be open)
            "log_open": self.log_tail.open,
            "log_hidden": self.log_hidden,
            "history": list(self.history),  # (step, metric pairs), shared: a copy at C speed (64 workers x 2000)
        }


@dataclass
class ClusterState:
    name: str
    workers: list[WorkerState]
    run_dir: str
    backend: str = "local"
    status: ClusterStatus = ClusterStatus.STARTING
    error: str = ""
    started: float = field(default_factory=time.time)
    ended: float | None = None
    restarts: int = 0
    restart_causes: list[str] = field(default_factory=list)
    # one entry per restart: generation, cause, kind, worker, time, resumed_from {epoch, step} (once known)
    restart_history: list[RestartEntry] = field(default_factory=list)
    failure_kind: str = ""  # the WorkerFailure class behind a failed run (magics/run/core/failures.py)
    generation: int = 0
    kernel_pid: int | None = None
    kernel_id: str = ""
    cell_id: str = ""  # the notebook cell that started the run (its execute request's cellId); "": not known
    notebook: str = ""  # that notebook's path, as the server gave it to the kernel (JPY_SESSION_NAME); "": none

    # elastic (--min-workers): {"min": M, "max": N}, the bounds of the group's size; None: a fixed size
    elastic: dict[str, int] | None = None

    @property
    def done(self) -> bool:
        return self.status in RECORDED_ENDS

    def resize(self, size: int, new_worker: Callable[[int], WorkerState]) -> None:
        """The workers of a group of ``size``: those beyond it dropped, new ones (``new_worker(index)``) added."""
        del self.workers[size:]
        self.workers.extend(new_worker(i) for i in range(len(self.workers), size))

    def wall_time(self, now: float | None = None) -> float:
        return (self.ended or (time.time() if now is None else now)) - self.started

    def snapshot(self, now: float | None = None) -> ClusterSnapshot:
        """The picture every view reads; ``now`` (wall time, default the clock's) measures a running run's time."""
        snapshot: ClusterSnapshot = {
            "name": self.name,
            "backend": self.backend,
            "status": str(self.status),
            "error": self.error,
            "started": self.started,
            "ended": self.ended,
            "wall_time": self.wall_time(now),
            "restarts": self.restarts,
            "restart_causes": list(self.restart_causes),
            "restart_history": [RestartEntry(**entry) for entry in self.restart_history],  # copies
            "failure_kind": self.failure_kind,
            "generation": self.generation,
            "run_dir": self.run_dir,
            "dropped": {},  # the relay's counts: the shell that owns the relay fills them in
            "kernel_pid": self.kernel_pid,
            "kernel_id": self.kernel_id,
            "workers": [w.snapshot() for w in self.workers],
        }
        if self.elastic:
            snapshot["elastic"] = dict(self.elastic)
        return snapshot
