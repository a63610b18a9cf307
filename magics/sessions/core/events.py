"""What the session core (``magics/sessions/core/cells.py``) is told, and what it asks the session to do.

Events are what ``Session`` (``magics/sessions/session.py``) observed: a cell submitted, a worker's ``cell``
message, a cell's end marker in a log, a Stop, the supervisor's round, and what the supervisor core decided about
the processes (a restart, a failure, the end). Actions are what the session must do: send a command to the
workers, tell a cell's views, mark progress for the stall watchdog, have the workers save their state, restart the
processes (the state in them is lost, but for what was saved), answer a Stop. Plain data; states are the enums of
``protocol/statuses.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Union

from nbworkers.protocol.statuses import CellEnd, CellState, ClusterStatus


class Group(str, Enum):
    """Where the session's processes are, as the shell sees them when it hands in an event."""

    READY = "ready"  # running, and every worker is connected to the command channel: a cell can be sent
    CONNECTING = "connecting"  # running, some worker not connected yet (starting, or restarted)
    RESTARTING = "restarting"  # the supervisor is restarting the group
    STOPPING = "stopping"  # the session is being stopped (Stop of the session, or it failed)

    @property
    def can_restart(self) -> bool:
        """A restart asked now would be carried out (not while one is under way or the session ends)."""
        return self in (Group.READY, Group.CONNECTING)


class InterruptOutcome(str, Enum):
    """What a Stop did (``Session.interrupt``'s answer, shown by ``%worker stop``)."""

    INTERRUPTING = "interrupting"  # KeyboardInterrupt on its way to every worker
    RESTARTING = "restarting"  # a second Stop: the processes restart, their state is lost
    CANCELLED = "cancelled"  # the cell was queued: it will not run
    NOT_RUNNING = "not running"  # that cell already ended
    IDLE = "idle"  # no cell runs


@dataclass(frozen=True)
class WorkerEnd:
    """One worker's ``cell end`` message."""

    status: CellEnd
    error: str = ""
    traceback: str = ""
    aborted: bool = False  # its collectives were aborted (``abort``): the process cannot use them again
    t: float | None = None  # the worker's wall time when it ended the cell
    step: int | None = None  # the last training step it reported in the cell (a Stop's note names it)


@dataclass(frozen=True)
class WorkerSave:
    """One worker's ``saved`` message: (name, kind, detail) saved, (name, why) left out, the folder, an error,
    (name, cell) the session cell that last bound a saved name."""

    saved: tuple[tuple[str, str, str], ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    folder: str = ""
    error: str = ""
    built_in: tuple[tuple[str, int], ...] = ()


# ----------------------------------------------------------------------------------------------- events
@dataclass(frozen=True)
class Submitted:
    """A cell was submitted (numbered from 1, in order, nbworkers' own cells too: the number the workers and the
    session's ``cells`` go by); it runs after the cells before it. The user's cells have numbers of their own
    (``CellRecord.shown``), which nbworkers' own cells do not use up."""

    cell: int
    timeout: float | None  # --timeout of the cell, seconds; None: none
    group: Group
    # a cell nbworkers runs itself (``%workers restore``: "restore"): called so, and not numbered as a user's cell
    label: str = ""
    prompt: int | None = None  # the notebook's execution count of the submitting cell: messages call it "cell [5]"


@dataclass(frozen=True)
class Tick:
    """Once per supervisor round: dispatch, the cell's timeout and grace periods, its end."""

    group: Group


@dataclass(frozen=True)
class InterruptRequested:
    """Stop: of the running cell (``cell`` None or the running one), or of a queued cell (cancelled)."""

    cell: int | None
    group: Group


@dataclass(frozen=True)
class Began:
    """A worker began running a cell (its ``cell start`` message)."""

    worker: int
    cell: int


@dataclass(frozen=True)
class Pausing:
    """A worker got the Stop's pause inside a training step (a distributed step call: a collective may be under
    way): it pauses when the step is done, however long it takes (no plain interrupt for it)."""

    worker: int
    cell: int


@dataclass(frozen=True)
class Paused:
    """A worker paused at a training step for a Stop; ``step``: its step count in the cell."""

    worker: int
    cell: int
    step: int


@dataclass(frozen=True)
class WorkerEnded:
    """A worker ended a cell (its ``cell end`` message)."""

    worker: int
    cell: int
    end: WorkerEnd


@dataclass(frozen=True)
class LogClosed:
    """A worker's end marker line for a cell arrived: that cell's output from it is complete."""

    worker: int
    cell: int


@dataclass(frozen=True)
class StateSaved:
    """A worker answered ``save`` (its ``saved`` cell message): what it saved, left out, where, or its error."""

    worker: int
    report: WorkerSave


@dataclass(frozen=True)
class GroupRestarting:
    """The supervisor decided to restart the processes (``RestartScheduled``): their state is lost."""

    cause: str
    on_purpose: bool  # a UserRestart (the Restart button, or this core's RestartLosingState), not a failure


@dataclass(frozen=True)
class SaveRequested:
    """The supervisor decided a restart and holds it (``SaveBeforeRestart``: a worker was killed, or the Restart
    button): the workers still ``alive`` save first; ``SaveFinished`` lets it go on."""

    cause: str
    alive: tuple[int, ...]
    on_purpose: bool  # the Restart button, not a failure


@dataclass(frozen=True)
class GroupFailed:
    """The supervisor failed the session (``Failed``): it is being stopped."""

    error: str


@dataclass(frozen=True)
class SessionEnded:
    """Every process is gone: the session ended with ``status`` and ``error``."""

    status: ClusterStatus
    error: str = ""


# ----------------------------------------------------------------------------------------------- actions
@dataclass(frozen=True)
class Dispatch:
    """Send the cell to every worker (``run``); it is running now."""

    cell: int


@dataclass(frozen=True)
class SendPause:
    """Stop, first step: ask ``workers`` to pause at their next report and say their step."""

    cell: int
    workers: tuple[int, ...]


@dataclass(frozen=True)
class SendResume:
    """Stop, second step: go on and raise KeyboardInterrupt at report number ``stop_at`` (the same on every one)."""

    cell: int
    workers: tuple[int, ...]
    stop_at: int


@dataclass(frozen=True)
class SendInterrupt:
    """Stop of a cell that does not report: plain KeyboardInterrupt on ``workers``."""

    cell: int
    workers: tuple[int, ...]


@dataclass(frozen=True)
class SendAbort:
    """A peer failed and ``workers`` did not end the cell within the peer grace: abort their collectives."""

    cell: int
    workers: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class SendSave:
    """Before a restart that loses the processes' state: ask ``workers`` (those that ended the cell) to save their
    namespaces (``StateSaved`` answers; ``RestartLosingState`` follows once all answered or the wait passed)."""

    cell: int
    workers: tuple[int, ...]
    holder: int = 0  # the worker that saves the models, optimizers and variables (worker 0 unless it is gone)


@dataclass(frozen=True)
class SaveFinished:
    """The save for the supervisor's held restart ended (answered, or ``save_wait`` passed): the restart goes on
    (the supervisor's ``SaveEnded``)."""


@dataclass(frozen=True)
class CellWorkerEnded:
    """A worker ended the cell: its view shows that worker's end."""

    cell: int
    worker: int
    end: WorkerEnd


@dataclass(frozen=True)
class CellConcluded:
    """The cell ended (its record holds the state, error, failed workers): its views finish, its waiters wake."""

    cell: int
    state: CellState


@dataclass(frozen=True)
class RestartLosingState:
    """Restart the session's processes on purpose (aborted collectives, a cell stuck after Stop, a second Stop):
    every variable in them is lost. The supervisor carries it out; ``GroupRestarting`` follows."""

    reason: str


@dataclass(frozen=True)
class MarkProgress:
    """A cell event: the session is not stalled (the supervisor's ``Progress``)."""

    worker: int | None = None


@dataclass(frozen=True)
class DropStale:
    """A worker's cell message for a cell that is not running: counted as stale, ignored."""

    detail: str


@dataclass(frozen=True)
class FailPulls:
    """Pending ``pull`` requests will get no answer (the processes restart)."""

    reason: str


@dataclass(frozen=True)
class Answer:
    """The answer to an ``InterruptRequested``."""

    outcome: InterruptOutcome


Event = Union[Submitted, Tick, InterruptRequested, Began, Pausing, Paused, WorkerEnded, LogClosed, StateSaved,
              GroupRestarting, SaveRequested, GroupFailed, SessionEnded]
Action = Union[Dispatch, SendPause, SendResume, SendInterrupt, SendAbort, SendSave, SaveFinished, CellWorkerEnded,
               CellConcluded, RestartLosingState, MarkProgress, DropStale, FailPulls, Answer]
