"""The no-progress watchdog of a run's attempt (``--stall-timeout``): pure, on the supervisor core's clock.

When no worker has reported progress for ``stall_timeout`` seconds, the workers are asked for their stacks (they go
into their logs); when there is still none ``stack_dump_wait`` seconds later, the group is stalled and the supervisor
restarts or fails it (``supervisor.py``). The stack dumps are log output themselves: from the dump on, silence is
not measured again until the verdict.
"""

from __future__ import annotations

from enum import Enum

from nbworkers.magics.run.core.events import Attempt
from nbworkers.magics.run.core.timings import Timings


class Stall(Enum):
    DUMP_STACKS = "dump stacks"  # silent for stall_timeout: ask for every worker's stacks
    STALLED = "stalled"  # still silent stack_dump_wait after the dump: the group is stuck


def look(timings: Timings, attempt: Attempt, now: float) -> Stall | None:
    """What the watchdog says of ``attempt`` at ``now`` (it notes the dump in ``attempt.stacks_dumped_at``)."""
    if not timings.stall_timeout:
        return None
    if attempt.stacks_dumped_at is None:
        if now - attempt.last_progress < timings.stall_timeout:
            return None
        attempt.stacks_dumped_at = now
        return Stall.DUMP_STACKS
    if now - attempt.stacks_dumped_at < timings.stack_dump_wait:
        return None
    attempt.stacks_dumped_at = None
    return Stall.STALLED


def stalled_message(timings: Timings) -> str:
    return (f"no worker reported progress for {timings.stall_timeout:g} s (--stall-timeout); "
            "their stacks are in their logs")
