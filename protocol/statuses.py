"""Where one worker is: the ``WorkerStatus`` values, defined once for every process.

The workers send most of these in their ``status`` messages (``protocol/wire.py`` checks them against
``SENT_BY_WORKERS``), so the protocol owns the values; the kernel sets the others itself (``STOPPING``,
``LOST``) and re-exports this enum beside its ``ClusterStatus`` (``magics/run/core/statuses.py``). The values are
the strings the state file, the REST API, the widget and ``%workers`` show: ``WorkerStatus.RUNNING == "running"``
and ``json.dumps`` writes ``"running"``.

Pure Python (``enum`` only): the workers and hosts import it at start.
"""

from __future__ import annotations

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
