"""Every status word, defined once for every process: where a run is (``ClusterStatus``), where one worker is
(``WorkerStatus``), what a view shows besides (``ViewStatus``), where a session's cell is (``CellState``) and how a
worker ended one (``CellEnd``); the ended statuses; and how a view shows each status (``LOOKS``: its label and its
colour).

The workers send most worker statuses in their ``status`` messages (``protocol/wire.py`` checks them against
``SENT_BY_WORKERS``); the kernel sets the others itself (``STOPPING``, ``LOST``). The values are the strings the
state file, the REST API, the widget and ``%workers`` show: ``WorkerStatus.RUNNING == "running"`` and
``json.dumps`` writes ``"running"``. Nothing else of nbworkers writes a status word as a string (tools/lint.py's
``status-words`` check): the widget's CSS colours are generated from ``LOOKS`` (magics/views/widget.py), the
sidebar's status type, ended set and colours too (tools/vocabulary.py writes labextension/src/statuses.ts and
labextension/style/statuses.css; tests/unit/test_vocabulary.py holds them and the widget's JavaScript to it).

Pure Python (``enum`` and ``dataclasses`` only): the workers and hosts import it at start.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Status(str, Enum):
    """A status (no members here): equal to its string value, printed as it, and final or not. The run's
    ``ClusterStatus`` and ``WorkerStatus`` both are one; their final values are the same four (``ENDED``)."""

    def __str__(self) -> str:
        return self.value

    @property
    def is_terminal(self) -> bool:
        """True once it has ended (``ENDED``): no status follows this one."""
        return self.value in ENDED


class ClusterStatus(Status):
    """Where a whole run is (``ClusterState.status``)."""

    STARTING = "starting"  # the group is launching (first time or after a restart)
    RUNNING = "running"  # some worker reported progress or said it runs
    RESTARTING = "restarting"  # a failure (or the user) asked for a restart: the group is being stopped
    STOPPING = "stopping"  # a stop was asked for: TERM sent, the grace period runs
    FINISHED = "finished"  # every awaited worker exited 0
    FAILED = "failed"  # a failure the policy did not restart (the error says which)
    STOPPED = "stopped"  # stopped by request (not a failure)
    LOST = "lost"  # the state file says it runs but its kernel is dead (the kernel's rundir liveness check)


class WorkerStatus(Status):
    """Where one worker is (``WorkerState.status`` in the kernel; the ``state`` of a ``status`` message)."""

    STARTING = "starting"  # process launched, importing
    WAITING = "waiting"  # waiting for its peers (strategy / collectives being set up)
    RUNNING = "running"
    RESTARTING = "restarting"  # its group is being restarted
    STOPPING = "stopping"  # asked to stop, not gone yet (set by the kernel)
    FINISHED = "finished"  # exited 0 (or retired by the supervisor once training ended)
    FAILED = "failed"
    STOPPED = "stopped"  # stopped by request or because another worker failed
    LOST = "lost"  # its run was lost (dead kernel; set by the kernel)


class ViewStatus(Status):
    """What a view shows that no run records: a card's status beside ``ClusterStatus`` and ``WorkerStatus``."""

    QUEUED = "queued"  # a session cell waiting for the cells before it (magics/sessions/cell.py)
    DETACHED = "detached"  # a --detach run's card in a view whose kernel restarted or died (it goes on without it)


# The ended statuses, defined here once: a run (or a worker) in one of them has ended and no status follows.
# FINISHED, FAILED and STOPPED are what a run's own supervisor records in its state; LOST is never recorded by it:
# others conclude it from a state that says "running" beside a dead kernel (magics/rundir/liveness.py).
# The front end's copies (labextension/src/format.ts ENDED, magics/views/widget_cards.js DONE) are held to this
# by tests/unit/test_vocabulary.py.
ENDED: frozenset[str] = frozenset({ClusterStatus.FINISHED, ClusterStatus.FAILED, ClusterStatus.STOPPED,
                                   ClusterStatus.LOST})
# The ends a run's supervisor records (``ENDED`` without LOST): a recorded status outside them means "not over
# yet, as far as its kernel said", which only a live kernel can keep true.
RECORDED_ENDS: frozenset[str] = ENDED - {ClusterStatus.LOST}

# Why a run stopped when the kernel that started it restarted or died (the worker hosts stop its workers when
# their kernel's pipe closes). One wording for every view: the reaper records it (magics/rundir/leftovers.py), the
# REST rows and ``%workers attach`` show it, and a ``LOST`` run (dead kernel, not reaped yet) reads as stopped.
# The front end's copies (labextension/src/format.ts, magics/views/widget_cards.js KERNEL_GONE) are held to it by
# tests/unit/test_vocabulary.py.
KERNEL_GONE = "stopped because its kernel restarted or died: run the cell again (--detach keeps a run across restarts)"
# What a view calls a LOST run: the same word as a recorded stop (it is being stopped; its workers cannot go on)
LOST_LABEL = "stopped"

# What a worker may say in a ``status`` message (the kernel drops any other ``state`` as malformed)
SENT_BY_WORKERS = frozenset(WorkerStatus) - {WorkerStatus.STOPPING, WorkerStatus.LOST}


class CellState(Status):
    """Where one cell of a session is (``magics/sessions/core/cells.py``; ``SessionCell.state``)."""

    QUEUED = "queued"  # submitted, waiting for the cells before it and for every worker to be ready
    RUNNING = "running"
    FINISHED = "finished"  # every worker ended it without an error
    FAILED = "failed"  # an error on a worker, its --timeout, or the session failed or restarted after an error
    STOPPED = "stopped"  # interrupted by Stop, or the processes restarted on purpose
    CANCELLED = "cancelled"  # never ran: Stop while queued, or a cell before it failed
    # A detached session's cell as a kernel sees it (magics/sessions/detach/remote_cell.py) once the session's
    # supervisor can no longer be asked (it ended or died); the session's own core never sets it.
    LOST = "lost"

    @property
    def is_terminal(self) -> bool:
        return self not in (CellState.QUEUED, CellState.RUNNING)

    @property
    def view_status(self) -> ClusterStatus:
        """The run status a view shows for a cell (it shows a cell as it shows a run)."""
        return _CELL_VIEW[self]


class CellEnd(str, Enum):
    """How one worker ended a cell (its ``cell end`` message's ``status``: ``protocol/session_wire.py``)."""

    OK = "ok"
    ERROR = "error"
    INTERRUPTED = "interrupted"  # KeyboardInterrupt (Stop, --timeout) or aborted collectives

    @property
    def worker_status(self) -> WorkerStatus:
        return {CellEnd.OK: WorkerStatus.FINISHED, CellEnd.ERROR: WorkerStatus.FAILED,
                CellEnd.INTERRUPTED: WorkerStatus.STOPPED}[self]


_CELL_VIEW = {CellState.QUEUED: ClusterStatus.STARTING, CellState.RUNNING: ClusterStatus.RUNNING,
              CellState.FINISHED: ClusterStatus.FINISHED, CellState.FAILED: ClusterStatus.FAILED,
              CellState.STOPPED: ClusterStatus.STOPPED, CellState.CANCELLED: ClusterStatus.STOPPED,
              CellState.LOST: ClusterStatus.LOST}


def is_terminal(status: str) -> bool:
    """Whether a cluster status string (from a snapshot or a state file) means the run ended."""
    try:
        return ClusterStatus(status).is_terminal
    except ValueError:
        return False


@dataclass(frozen=True)
class Look:
    """How a view shows one status: its label and its badge's colour (white text on it; a CSS colour)."""

    label: str
    colour: str


# How every status a view shows looks, defined here once (keys: the values of ClusterStatus, WorkerStatus and
# ViewStatus; the run's and the worker's enums share their values). The text/HTML summary (magics/views/words.py),
# the widget (its CSS is generated from this: magics/views/widget.py; its JavaScript labels are held to it by
# tests/unit/test_vocabulary.py) and the sidebar (tools/vocabulary.py writes its statuses.css) all show these.
LOOKS: dict[str, Look] = {
    ViewStatus.QUEUED: Look("queued", "#9ca3af"),
    WorkerStatus.STARTING: Look("starting", "#6b7280"),
    WorkerStatus.WAITING: Look("waiting for peers", "#b45309"),
    WorkerStatus.RUNNING: Look("running", "#1d4ed8"),
    WorkerStatus.RESTARTING: Look("restarting", "#c2410c"),
    WorkerStatus.STOPPING: Look("stopping", "#7e22ce"),
    WorkerStatus.FINISHED: Look("finished", "#15803d"),
    WorkerStatus.FAILED: Look("failed", "#b91c1c"),
    WorkerStatus.STOPPED: Look("stopped", "#6b21a8"),
    ClusterStatus.LOST: Look(LOST_LABEL, "#374151"),
    ViewStatus.DETACHED: Look("detached", "#6b7280"),
}
