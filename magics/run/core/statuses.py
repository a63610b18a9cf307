"""Every status a run and a worker can be in, as ``str`` enums.

``ClusterStatus`` is the kernel's own; ``WorkerStatus`` is defined in ``protocol/statuses.py`` (the workers send
those values) and re-exported here, so the kernel side imports both from one place.

The values are the strings the state file, the REST API, the widget and ``%workers`` have always used:
``ClusterStatus.RUNNING == "running"`` and ``json.dumps`` writes ``"running"``, so a status set from an enum
and one read back from a JSON file compare equal.
"""

from __future__ import annotations

from nbworkers.protocol.statuses import Status, WorkerStatus

__all__ = ["ClusterStatus", "WorkerStatus", "is_terminal"]


class ClusterStatus(Status):
    """Where a whole run is (``ClusterState.status``)."""

    STARTING = "starting"  # the group is launching (first time or after a restart)
    RUNNING = "running"  # some worker reported progress or said it runs
    RESTARTING = "restarting"  # a failure (or the user) asked for a restart: the group is being stopped
    STOPPING = "stopping"  # a stop was asked for: TERM sent, the grace period runs
    FINISHED = "finished"  # every awaited worker exited 0
    FAILED = "failed"  # a failure the policy did not restart (the error says which)
    STOPPED = "stopped"  # stopped by request (not a failure)
    LOST = "lost"  # the state file says it runs but its kernel is dead (magics/rundir/liveness.py)


def is_terminal(status: str) -> bool:
    """Whether a cluster status string (from a snapshot or a state file) means the run ended."""
    try:
        return ClusterStatus(status).is_terminal
    except ValueError:
        return False
