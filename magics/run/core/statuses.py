"""Every status a run and a worker can be in, as ``str`` enums.

``ClusterStatus``, ``WorkerStatus``, ``ViewStatus`` and the ended statuses (``ENDED``, ``RECORDED_ENDS``) are
defined in ``protocol/statuses.py`` (the workers send worker statuses;
the state file, the REST API and the sidebar carry run statuses) and re-exported here with the session's cell
states, so the kernel side imports them from one place.

The values are the strings the state file, the REST API, the widget and ``%workers`` have always used:
``ClusterStatus.RUNNING == "running"`` and ``json.dumps`` writes ``"running"``, so a status set from an enum
and one read back from a JSON file compare equal.
"""

from __future__ import annotations

from enum import Enum

from nbworkers.protocol.statuses import (
    ENDED,
    KERNEL_GONE,
    LOST_LABEL,
    RECORDED_ENDS,
    ClusterStatus,
    Status,
    ViewStatus,
    WorkerStatus,
)

__all__ = ["ENDED", "KERNEL_GONE", "LOST_LABEL", "RECORDED_ENDS", "CellEnd", "CellState", "ClusterStatus",
           "ViewStatus", "WorkerStatus", "is_terminal"]


class CellState(Status):
    """Where one cell of a session is (``magics/sessions/core/cells.py``; ``SessionCell.state``)."""

    QUEUED = "queued"  # submitted, waiting for the cells before it and for every worker to be ready
    RUNNING = "running"
    FINISHED = "finished"  # every worker ended it without an error
    FAILED = "failed"  # an error on a worker, its --timeout, or the session failed or restarted after an error
    STOPPED = "stopped"  # interrupted by Stop, or the processes restarted on purpose
    CANCELLED = "cancelled"  # never ran: Stop while queued, or a cell before it failed

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
              CellState.STOPPED: ClusterStatus.STOPPED, CellState.CANCELLED: ClusterStatus.STOPPED}

def is_terminal(status: str) -> bool:
    """Whether a cluster status string (from a snapshot or a state file) means the run ended."""
    try:
        return ClusterStatus(status).is_terminal
    except ValueError:
        return False
