"""What the supervisor core (magics/run/core/supervisor.py) is told, and what it asks the cluster to do.

Events are what ``Cluster`` observed (a relay message, processes that exited, a stop button, the clock ticking;
the core reads its injected clock, never the machine's);
actions are what it must do with processes (stop them, kill them, ask for their stacks, start the group again)
or tell its subclasses (a session ends its cells when a restart is scheduled or the run failed). Plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from nbworkers.magics.run.core.failures import UserRestart, WorkerFailure


@dataclass
class Attempt:
    """One launch of the whole group: the first, then one per restart (never a single worker)."""

    generation: int
    cause: WorkerFailure | None  # what restarted the group (None: the first launch)
    started: float  # clock
    last_progress: float  # clock: the last log line, metrics, status or cell event
    stacks_dumped_at: float | None = None  # the watchdog asked for stacks; it acts stack_dump_wait later
    training_ended_at: float | None = None  # every awaited task exited 0; the others are retired
    retired: set[int] = field(default_factory=set)  # unawaited tasks stopped because training ended
    unlaunched: set[int] = field(default_factory=set)  # no process: the launch failed before it started them


# ----------------------------------------------------------------------------------------------- events
@dataclass(frozen=True)
class Progress:
    """A worker printed something (or, in a session, a cell event arrived): the run is not stalled."""

    worker: int | None = None


@dataclass(frozen=True)
class Logged:
    """A worker's log lines (TensorFlow's C++ start-up chatter already filtered out, ``hidden`` lines so far):
    they go into its log tail, and the run is not stalled."""

    worker: int
    lines: tuple[str, ...]
    hidden: int = 0


@dataclass(frozen=True)
class Hello:
    """A worker's first message: its process id and host."""

    worker: int
    pid: int
    host: str = ""


@dataclass(frozen=True)
class Metrics:
    """A worker reported metrics (epoch, step, values): progress, and the run is running."""

    worker: int
    content: dict[str, Any]


@dataclass(frozen=True)
class StatusReported:
    """A worker said where it is (``waiting`` for its peers, ``running``, ...)."""

    worker: int
    state: str
    detail: str = ""


@dataclass(frozen=True)
class Exited:
    """Processes that exited since the last look: (worker index, exit code, the end of its log)."""

    exits: tuple[tuple[int, int, str], ...]


@dataclass(frozen=True)
class StopRequested:
    """``stop()``, the widget's Stop button or the server extension's stop file. Not a failure."""


@dataclass(frozen=True)
class RestartRequested:
    """``restart()``, the widget's Restart button, or a session restarting its processes on purpose."""

    cause: UserRestart = field(default_factory=lambda: UserRestart("restart requested"))
    saved: bool = False  # a session already had its workers save (its own restart): no save hold


@dataclass(frozen=True)
class HoldRestarts:
    """A participant (a session) saves what the workers hold before their processes restart: from now on a
    restart first asks it (``SaveBeforeRestart``) and stops the group only at ``SaveEnded`` or ``wait`` seconds
    later (magics/run/core/save_hold.py)."""

    wait: float


@dataclass(frozen=True)
class SaveEnded:
    """The participant's save before the restart ended (answered, or its own wait passed): the restart goes on."""


@dataclass(frozen=True)
class Tick:
    """Once per supervisor round: timeouts, the kill deadline, the watchdog, retirement, a due restart."""

    idle: bool = False  # a session with no cell running: silence is not a stall


@dataclass(frozen=True)
class CapacitySeen:
    """An elastic run's look at its cluster: how many workers could be placed now, the run's own included.
    ``asked``: the user's ``%workers resize NAME`` (the answer is noted in ``Supervisor.resize_note``)."""

    workers: int
    asked: bool = False


@dataclass(frozen=True)
class CapacityUnknown:
    """An elastic run's look at its cluster failed (``why``); it looks again at the next interval."""

    why: str


@dataclass(frozen=True)
class LaunchFailed:
    """A relaunch of the group raised (for example, too few nodes are left, or Ray did not start the actors in time),
    having started ``launched`` workers (0 to ``launched - 1``; the shell killed them): the others have no process,
    and no exit of theirs will come."""

    error: str
    launched: int = 0


@dataclass(frozen=True)
class Ended:
    """Every process is gone and the relay is drained: the run's final status is decided."""


@dataclass(frozen=True)
class SupervisorCrashed:
    """The shell's supervisor loop raised: the run fails with the traceback, and ends."""

    traceback: str


# ----------------------------------------------------------------------------------------------- actions
@dataclass(frozen=True)
class StopGroup:
    """Ask every worker to stop (INT, then TERM; the kill deadline follows)."""


@dataclass(frozen=True)
class KillGroup:
    """SIGKILL every process of the run that is left."""


@dataclass(frozen=True)
class DumpStacks:
    """Ask every worker to write its threads' stacks into its log (the watchdog)."""


@dataclass(frozen=True)
class RetireWorker:
    """Stop one unawaited task (a server, the evaluator): training ended."""

    index: int


@dataclass(frozen=True)
class Relaunch:
    """Kill what is left of the group and launch it again (``attempt.generation``, fresh ports)."""

    attempt: Attempt


@dataclass(frozen=True)
class RestartScheduled:
    """A restart was decided (the group is being stopped): subclasses end what the restart loses."""

    cause: WorkerFailure


@dataclass(frozen=True)
class SaveBeforeRestart:
    """A restart was decided, the group still runs: the participant has the workers still ``alive`` save first
    (``SaveEnded``); ``StopGroup`` and ``RestartScheduled`` follow."""

    cause: WorkerFailure
    alive: tuple[int, ...]


@dataclass(frozen=True)
class Failed:
    """The run failed and is being stopped."""

    failure: WorkerFailure


Event = Union[Progress, Logged, Hello, Metrics, StatusReported, Exited, StopRequested, RestartRequested, Tick,
              CapacitySeen, CapacityUnknown, LaunchFailed, Ended, SupervisorCrashed, HoldRestarts, SaveEnded]
Action = Union[StopGroup, KillGroup, DumpStacks, RetireWorker, Relaunch, RestartScheduled, SaveBeforeRestart, Failed]
