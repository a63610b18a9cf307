"""What went wrong with a worker group, each failure its own exception, and whether a restart may help.

The supervisor classifies what it saw (exit codes, the tail of each worker's log, a silent group) into one
of these; the restart policy (magics/run/core/restart_policy.py) then decides: retry the whole group, or stop and show
it. Modelled on Ray Train v2's failure handling.
"""

from __future__ import annotations

import re
import signal

from nbworkers.protocol import tf_messages
from nbworkers.protocol.wire import ENDED_EARLY_EXIT_CODE, ENDED_EARLY_LINE, PREEMPTION_EXIT_CODE

# Exit codes that mean "the machine took it away", not "the code is wrong".
OOM_KILLED_CODE = 137  # 128 + SIGKILL, as containers report an out-of-memory kill
PREEMPTION_EXIT_CODES = (PREEMPTION_EXIT_CODE,)  # tf.distribute PreemptionCheckpointHandler's exit after its save
# What a surviving worker says when a peer vanished under it: the peer's failure is the cause, not this one.
# (Upstream log texts, with where they come from: protocol/tf_messages.py.)
PEER_LOST_MARKERS = tf_messages.PEER_LOST_MARKERS
# The line a backend writes at the end of a worker's log when the machine (Ray node) hosting it went away
# (magics/backends/ray/worker.py); followed by the node and Ray's reason.
NODE_LOST_MARKER = "--- nbworkers: node lost:"
NODE_LOST_LINES = 3  # the marker counts only among the log's last lines (an older run's note stays in the file)


class WorkerFailure(Exception):
    """A worker group failure; ``retryable`` says whether restarting the group may help."""

    retryable = False

    def __init__(self, message: str, worker: int | None = None, log_tail: str = ""):
        super().__init__(message)
        self.worker = worker
        self.log_tail = log_tail

    @property
    def kind(self) -> str:
        return type(self).__name__

    def signature(self) -> str:
        """What makes two failures "the same error" (a repeat is not retried)."""
        return f"{self.kind}:{self.worker}:{_last_error_line(self.log_tail)}"


class WorkerRaised(WorkerFailure):
    """An exception in the user's code: restarting would raise it again."""


class WorkerCrashed(WorkerFailure):
    """Killed by a signal or by the out-of-memory killer: the code may well be fine."""

    retryable = True


class WorkerPreempted(WorkerFailure):
    """Asked to leave (SIGTERM, or a stop's SIGINT), perhaps after saving a checkpoint."""

    retryable = True


class PeerLost(WorkerFailure):
    """A worker failed because a peer vanished under it (TensorFlow's collectives or coordination service)."""

    retryable = True


class NodeLost(WorkerFailure):
    """The machine (Ray node) hosting a worker went away: the code is fine, the group restarts on the nodes left."""

    retryable = True

    def signature(self) -> str:
        return f"{self.kind}:{self}"  # another node lost is another failure, not a repeat


class PortCollision(WorkerFailure):
    """A TensorFlow server could not bind the port it was given: another process took it meanwhile."""

    retryable = True


class WorkerEndedEarly(WorkerFailure):
    """A worker exited with 0 before its cell's end (its host saw no end line: protocol/wire.py CELL_END_LINE): no
    finish. The code may be fine (a thread of a library called ``os._exit(0)``), so the group may restart."""

    retryable = True


class GroupStalled(WorkerFailure):
    """No worker reported progress for ``--stall-timeout`` seconds (one may have died quietly)."""

    retryable = True


class RunTimedOut(WorkerFailure):
    """The run went past ``--timeout``."""


class UserRestart(WorkerFailure):
    """Not a failure: the user asked for a restart (the widget's Restart button, ``cluster.restart()``)."""

    retryable = True


class CapacityReturned(UserRestart):
    """Not a failure: an elastic group smaller than ``-n`` has room for more workers again (a node joined, or
    ``%workers resize NAME``); it restarts bigger from its last checkpoint and uses up no restart."""


class TooFewWorkers(WorkerFailure):
    """An elastic group's restart found room for fewer workers than ``--min-workers`` (magics/run/core/elastic.py)."""


class RelaunchFailed(WorkerFailure):
    """A restart was due, but the group could not be started again (for example, too few nodes are left)."""


class RestartsExhausted(WorkerFailure):
    """Retryable failures, but no restarts left (``--max-restarts``)."""


def _last_error_line(log_tail: str) -> str:
    for line in reversed(log_tail.splitlines()):
        if re.match(r"^\w[\w.]*(Error|Exception|Interrupt|Exit)\b", line.strip()):
            return line.strip()
    return ""


def node_lost_line(log_tail: str) -> str:
    """What the backend said about the lost node (the rest of its ``NODE_LOST_MARKER`` line), or ""."""
    for line in [x for x in log_tail.splitlines() if x.strip()][-NODE_LOST_LINES:]:
        if line.startswith(NODE_LOST_MARKER):
            return line[len(NODE_LOST_MARKER):].strip()
    return ""


def _ended_early_line(log_tail: str) -> str:
    """What the host said of a worker that exited with 0 before its cell's end (the rest of its last line), or ""."""
    lines = [x for x in log_tail.splitlines() if x.strip()]
    if lines and lines[-1].startswith(ENDED_EARLY_LINE):
        return lines[-1][len(ENDED_EARLY_LINE):].strip().removeprefix("the worker ")
    return ""


def classify_exit(worker: int, code: int, log_tail: str) -> WorkerFailure:
    """The failure a worker's non-zero exit means, from its exit code and the end of its log."""
    lost = node_lost_line(log_tail)
    if lost:
        return NodeLost(f"worker {worker}'s node was lost: {lost}", worker, log_tail)
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if -code == signal.SIGTERM:
            return WorkerPreempted(f"worker {worker} was terminated ({name})", worker, log_tail)
        if -code == signal.SIGINT:  # a stop's first signal (procs/kill.py: interrupt_group), as SIGTERM: asked to go
            return WorkerPreempted(f"worker {worker} was interrupted ({name})", worker, log_tail)
        return WorkerCrashed(f"worker {worker} was killed by {name}", worker, log_tail)
    early = _ended_early_line(log_tail) if code == ENDED_EARLY_EXIT_CODE else ""
    if early:
        return WorkerEndedEarly(f"worker {worker} {early}", worker, log_tail)
    if code == OOM_KILLED_CODE:
        return WorkerCrashed(f"worker {worker} was killed (exit code 137: out of memory?)", worker, log_tail)
    if code in PREEMPTION_EXIT_CODES:
        return WorkerPreempted(f"worker {worker} was preempted and saved a checkpoint (exit code {code})", worker,
                               log_tail)
    if tf_messages.mentions(log_tail, tf_messages.PORT_TAKEN_MARKERS):  # (launch/ports.py: the port race)
        return PortCollision(f"worker {worker}'s TensorFlow server could not bind its port", worker, log_tail)
    last = _last_error_line(log_tail)
    if last and any(marker in last for marker in PEER_LOST_MARKERS):
        return PeerLost(f"worker {worker} lost a peer: {last}", worker, log_tail)
    detail = f": {last}" if last else ""
    return WorkerRaised(f"worker {worker} exited with code {code}{detail}", worker, log_tail)


def root_cause(failures: list[WorkerFailure]) -> WorkerFailure:
    """Of the failures seen together, the one that explains the others: a crash before a lost peer."""
    order = (NodeLost, PortCollision, WorkerCrashed, WorkerEndedEarly, WorkerPreempted, GroupStalled, WorkerRaised,
             PeerLost)
    for kind in order:
        for failure in failures:
            if type(failure) is kind:
                return failure
    return failures[0]

