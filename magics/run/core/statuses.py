"""The statuses, as the run's core and the sessions import them: a re-export of ``protocol/statuses.py``, where
every status word is defined (``ClusterStatus``, ``WorkerStatus``, ``ViewStatus``, ``CellState``, ``CellEnd``, the
ended statuses). New code imports ``nbworkers.protocol.statuses``; the views and run directories do (the
import-linter contract "The views and run directories take the statuses from the protocol" holds it).
"""

from __future__ import annotations

from nbworkers.protocol.statuses import (
    ENDED,
    KERNEL_GONE,
    LOST_LABEL,
    RECORDED_ENDS,
    CellEnd,
    CellState,
    ClusterStatus,
    ViewStatus,
    WorkerStatus,
    is_terminal,
)

__all__ = ["ENDED", "KERNEL_GONE", "LOST_LABEL", "RECORDED_ENDS", "CellEnd", "CellState", "ClusterStatus",
           "ViewStatus", "WorkerStatus", "is_terminal"]
