"""The restart policy: given one failure of a worker group, restart the whole group (after a back-off) or fail.

One object decides and owns what is left: restarts (``--max-restarts``) and port retries (``port_retries``).
Modelled on Ray Train v2's ``FailurePolicy.make_decision``: the supervisor classifies what it saw into a
``WorkerFailure`` (``failures``) and acts on the ``Decision``; it never counts or compares failures itself.

The rules, in order:

- ``UserRestart`` (the Restart button, ``cluster.restart()``, a session restarting its processes) is not a
  failure: always restarted at once, and it uses up nothing.
- ``PortCollision`` is a race, not an error: restarted at once while port retries are left, then failed.
- A failure that is not retryable (an exception in the user's code, ``--timeout``) fails the run.
- A retryable failure with no restarts left fails as ``RestartsExhausted``.
- The same error twice in a row (same kind, worker and last error line, with no progress in between) is
  permanent: it fails the run.
- Else restart after ``restart_backoff * 2**restarts_done`` seconds (at most ``restart_backoff_max``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from nbworkers.magics.run.core.failures import PortCollision, RestartsExhausted, UserRestart, WorkerFailure


class Action(str, Enum):
    RESTART = "restart"
    FAIL = "fail"


@dataclass(frozen=True)
class Decision:
    action: Action
    backoff: float  # seconds to wait once the group is gone, before it starts again (0 for a failure)
    why: str  # one line for logs and tests: the rule that decided
    failure: WorkerFailure  # what the run records: the failure itself, or RestartsExhausted wrapping it

    @property
    def restart(self) -> bool:
        return self.action is Action.RESTART


class RestartPolicy:
    def __init__(self, max_restarts: int, port_retries: int, backoff: float, backoff_max: float):
        self.max_restarts = max_restarts
        self.restarts_left = max_restarts
        self.port_retries_left = port_retries
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.restarts_done = 0  # every restart granted (user, port, failure): the back-off doubles with each
        self._previous: WorkerFailure | None = None  # the last failure decided on, since the last progress

    @classmethod
    def from_settings(cls, settings: Any, max_restarts: int | None = None) -> "RestartPolicy":
        """The policy of one run: ``max_restarts`` is the cell's ``--max-restarts`` (None: the setting)."""
        limit = max_restarts if max_restarts is not None else settings.max_restarts
        return cls(limit, settings.port_retries, settings.restart_backoff, settings.restart_backoff_max)

    def progressed(self) -> None:
        """The run made progress since the last failure: a repeat of it is bad luck again, not a bug."""
        self._previous = None

    def decide(self, failure: WorkerFailure) -> Decision:
        if isinstance(failure, UserRestart):
            return self._restart(failure, 0.0, "asked for (not a failure)")
        previous, self._previous = self._previous, failure
        if isinstance(failure, PortCollision):
            if self.port_retries_left <= 0:
                return Decision(Action.FAIL, 0.0, "a port collision with no port retries left", failure)
            self.port_retries_left -= 1
            return self._restart(failure, 0.0, f"a port race ({self.port_retries_left} port retries left)")
        if not failure.retryable:
            return Decision(Action.FAIL, 0.0, f"{failure.kind} is not retryable", failure)
        if self.restarts_left <= 0:
            exhausted = RestartsExhausted(f"{failure} (no restarts left: --max-restarts {self.max_restarts})",
                                          failure.worker, failure.log_tail)
            return Decision(Action.FAIL, 0.0, "no restarts left", exhausted)
        if previous is not None and previous.signature() == failure.signature():
            return Decision(Action.FAIL, 0.0, "the same error twice in a row is permanent", failure)
        self.restarts_left -= 1
        backoff = min(self.backoff * (2 ** self.restarts_done), self.backoff_max)
        return self._restart(failure, backoff, f"retryable ({self.restarts_left} restarts left)")

    def _restart(self, failure: WorkerFailure, backoff: float, why: str) -> Decision:
        self.restarts_done += 1
        return Decision(Action.RESTART, backoff, why, failure)
