"""What a participant of a run loop gets (``RunPort``): a port into its run, never the loop itself.

As Ray Train v2's controller callbacks get a decision or a worker group at fixed hooks and never the controller, a
participant (a session: magics/sessions/participant.py) reads what it may know of the run and says what it has to
say; the loop alone moves its state and its core's. Five members:

- ``facts``: what holds for the whole run (its name, key, settings and lock), given once;
- ``now()``: the run as it is (lock held): its generation, its workers, whether it is ending, whether a restart is
  under way, its status and error;
- ``post(event)``: an event for the run core, or for the participant's own core: both wait in the loop's one
  queue, so nothing is handled inside another event's actions;
- ``changed()``: what the views show changed (they are refreshed at the loop's next round);
- ``dropped(what, detail)``: a message the participant refused, counted with the relay's drops.

tools/lint.py's seams check holds the rest: nothing outside magics/run/ assigns attributes of the loop or a core.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from nbworkers.magics.settings import WorkerSettings
from nbworkers.protocol.statuses import ClusterStatus


@dataclass(frozen=True)
class RunFacts:
    """What holds for the whole run: its name, its key (commands and data are signed with it), the settings and the
    loop's lock (a participant's state is under it too)."""

    name: str
    key: str
    settings: WorkerSettings
    lock: threading.RLock


@dataclass(frozen=True)
class RunNow:
    """The run as it is when asked (lock held)."""

    generation: int  # the current launch's (the group's processes of an earlier one are gone)
    workers: int
    ending: bool  # stopping, or ended: no new work for it
    restart_pending: bool  # a restart of the group is under way
    status: ClusterStatus
    error: str


class RunPort(Protocol):
    @property
    def facts(self) -> RunFacts:
        """The run's name, key, settings and lock."""

    def now(self) -> RunNow:
        """The run as it is (lock held)."""

    def post(self, event: object) -> None:
        """An event for the run core (``magics/run/core/events.py``) or for this participant's own (lock held):
        handled in the loop's queue, after the event being handled, if any."""

    def changed(self) -> None:
        """What the views show changed (lock held)."""

    def dropped(self, what: str, detail: str) -> None:
        """A message refused: ``what`` is a relay drop count (``stale``, ``oversized``, ``malformed``)."""
