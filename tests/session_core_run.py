"""A session core (magics/sessions/core/cells.py) on a fake clock, for the unit tests that drive it."""

from __future__ import annotations

from nbworkers.magics.sessions.core import SessionCore, SessionTimings
from nbworkers.magics.sessions.core import events as ev
from nbworkers.magics.sessions.core.events import Group, InterruptOutcome, WorkerEnd
from nbworkers.protocol.statuses import CellEnd, CellState

READY, CONNECTING, RESTARTING, STOPPING = Group.READY, Group.CONNECTING, Group.RESTARTING, Group.STOPPING
OK = WorkerEnd(CellEnd.OK)
RAISED = WorkerEnd(CellEnd.ERROR, "ValueError: shapes differ", "Traceback ...\nValueError: shapes differ")
INTERRUPTED = WorkerEnd(CellEnd.INTERRUPTED, "stopped")
ABORTED = WorkerEnd(CellEnd.INTERRUPTED, "collective aborted", aborted=True)
TIMINGS = SessionTimings(peer_grace=2.0, abort_grace=5.0, interrupt_grace=10.0, pause_wait=1.0, log_close_wait=1.0)


class Session:
    """A session core with two workers on a fake clock; ``actions`` keeps everything it asked for."""

    def __init__(self, workers: int = 2, timings: SessionTimings = TIMINGS):
        self.now = 100.0
        self.timings = timings
        self.core = SessionCore("s", workers, lambda: self.timings, clock=lambda: self.now)
        self.actions: list[ev.Action] = []

    def send(self, event: ev.Event) -> list[ev.Action]:
        actions = self.core.handle(event)
        self.actions += actions
        return actions

    def submit(self, timeout: float | None = None, group: Group = READY, label: str = "",
               prompt: int | None = None) -> list[ev.Action]:
        return self.send(ev.Submitted(len(self.core.records) + 1, timeout, group, label, prompt))

    def tick(self, seconds: float = 0.0, group: Group = READY) -> list[ev.Action]:
        self.now += seconds
        return self.send(ev.Tick(group))

    def end(self, cell: int, *ends: WorkerEnd, close_logs: bool = True) -> None:
        for worker, end in enumerate(ends):
            self.send(ev.WorkerEnded(worker, cell, end))
            if close_logs:
                self.send(ev.LogClosed(worker, cell))

    def stop(self, cell: int | None = None, group: Group = READY) -> tuple[InterruptOutcome, list[ev.Action]]:
        actions = self.send(ev.InterruptRequested(cell, group))
        assert isinstance(actions[-1], ev.Answer)
        return actions[-1].outcome, actions[:-1]

    def state(self, cell: int) -> CellState:
        return self.core.record(cell).state


def kinds(actions: list[ev.Action]) -> list[str]:
    return [type(a).__name__ for a in actions]


def concluded(actions: list[ev.Action]) -> list[tuple[int, CellState]]:
    return [(a.cell, a.state) for a in actions if isinstance(a, ev.CellConcluded)]


# ----------------------------------------------------------------------------------------------- queue and dispatch


MODEL_SAVED = ev.WorkerSave(saved=(("model", "model", "4 weights + 9 optimizer variables, 0.0 MiB"),
                                   ("step_size", "variable", "float32 ()"), ("x", "array", "float32 (512, 8)"),
                                   ("built_in_cell", "value", "int")),
                            skipped=(("dataset", "a _RepeatDataset"),),
                            folder="/runs/s/session-state/gen-1/worker-0")
VALUES_SAVED = ev.WorkerSave(saved=(("x", "array", "float32 (512, 8)"), ("built_in_cell", "value", "int")),
                             folder="/runs/s/session-state/gen-1/worker-1")
