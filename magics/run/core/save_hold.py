"""A restart held while a participant saves (pure): the supervisor's part of "every restart path saves".

A session's workers hold state that a restart loses. Once a participant asked for it (``HoldRestarts``), a restart
the supervisor decides (a worker killed by hand or by the out-of-memory killer, the widget's or the sidebar's
Restart, a stall) does not stop the group at once: it tells the participant (``SaveBeforeRestart``, with the
workers still alive), and stops the group at the participant's ``SaveEnded``, at ``wait`` seconds at the latest, or
as soon as every process is gone anyway. A restart the session asked for itself after its own save
(``RestartRequested(saved=True)``) and a failure that ends the run are never held.
"""

from __future__ import annotations

from dataclasses import dataclass

HOLD_MARGIN = 5.0  # seconds beyond the participant's own wait: the supervisor's backstop if it never answers


@dataclass
class SaveHold:
    """``wait``: seconds a restart waits for the save (0: restarts are not held); ``until``: the clock time the
    held restart goes on by itself (None: none is held)."""

    wait: float = 0.0
    until: float | None = None

    @property
    def holding(self) -> bool:
        return self.until is not None

    def begin(self, now: float) -> bool:
        """Hold the restart just decided; False: restarts are not held (no participant saves)."""
        if self.wait <= 0:
            return False
        self.until = now + self.wait + HOLD_MARGIN
        return True

    def due(self, now: float, all_exited: bool) -> bool:
        """The held restart goes on now: its time passed, or no process is left to save anything."""
        return self.until is not None and (now >= self.until or all_exited)

    def release(self) -> bool:
        """End the hold; True: one was held (the group must be stopped now)."""
        held, self.until = self.until is not None, None
        return held
