"""A restart that waits for the workers' save (pure data for ``cells.py``): how it ends the running cell, and the
save under way.

Two ways lead here. The session core restarts the processes itself (aborted collectives, a cell stuck after Stop,
the second Stop): it asks the save, then ``RestartLosingState``. Or the supervisor decided a restart (a worker
killed by hand or by the out-of-memory killer, the widget's or the sidebar's Restart) and holds it
(``SaveRequested``, magics/run/core/save_hold.py): the core asks the save of the workers still alive, then
``SaveFinished`` lets the supervisor stop the group. Either way a worker still in the running cell is first told
to end it (``SendAbort``: a save needs the worker's main thread) and asked to save once it did, within
``session_abort_grace`` seconds (one that does not is not saved); all of it within ``session_save_wait`` seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nbworkers.magics.sessions.core.events import WorkerEnd
from nbworkers.protocol.statuses import CellState


@dataclass(frozen=True)
class Outcome:
    """How a restart ends the running cell."""

    state: CellState
    error: str = ""
    failed: tuple[int, ...] = ()


@dataclass
class Saving:
    """A restart waits for the workers' save: since when, why it restarts, whether the supervisor holds it
    (``held``: ``SaveFinished`` ends the wait, not ``RestartLosingState``), and the workers told to end the cell
    whose save is asked once they did (``awaiting``)."""

    asked_at: float
    reason: str
    held: bool = False
    awaiting: set[int] = field(default_factory=set)


# The worker that saves the models, optimizers and variables (every worker holds the same under
# MultiWorkerMirroredStrategy): see pick_holder; else the first that ends the cell; none yet:
NO_HOLDER = -1


def pick_holder(savers: tuple[int, ...], ends: Mapping[int, WorkerEnd]) -> int:
    """The worker whose save holds the models, optimizers and variables: the lowest of ``savers`` that ended the cell
    by itself, else the lowest of them. A worker whose collectives were aborted stopped inside a step, which may
    have moved its optimizer's iterations and not its weights: its state is not one the training had. The worker
    that raised between steps (or finished) holds the last step every worker completed."""
    whole = [w for w in savers if w in ends and not ends[w].aborted]
    return min(whole or savers, default=NO_HOLDER)
