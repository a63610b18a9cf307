"""TensorFlow's ``PreemptionCheckpointHandler`` (PCH), as ``distlib.worker.preemption`` uses it: made with our own
save and exit functions, and told of a SIGTERM by our signal thread (PCH's private
``_maybe_set_received_own_sigterm``, which tells the peers through the coordination service). Group
``preemption_handler`` in ``internals``.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from nbworkers.distlib.compat import internals
from nbworkers.protocol import wire

# The names PCH gives its two watcher threads (tensorflow 2.15.1 and 2.21.0, failure_handling.py: "%s" is the task id)
WATCHER_THREADS = ("PeerTerminationWatcher-", "WorkerTerminationSignalWatcher-")


class HandlerMovedError(RuntimeError):
    """The installed TensorFlow lacks what the preemption save needs (the message names it)."""


def create(cluster_resolver: Any, checkpoint_manager: Any, termination_config: Any) -> Any:
    """A ``PreemptionCheckpointHandler``; raises HandlerMovedError when its symbols are gone."""
    gone = internals.missing("preemption_handler")
    if gone:  # the caller turns this into "saving on SIGTERM is off: ..."
        raise HandlerMovedError("TensorFlow's PreemptionCheckpointHandler moved:\n" + internals.describe(gone))
    from tensorflow.python.distribute.failure_handling import failure_handling

    return failure_handling.PreemptionCheckpointHandler(cluster_resolver, checkpoint_manager,
                                                        termination_config=termination_config)


def quiet_watchers_when_peers_leave() -> None:
    """PCH's peer watcher thread waits on the coordination service's key-value store for the whole process; when the
    worker holding that service (worker 0) ends first, the wait fails with ``UnavailableError`` and Python printed the
    thread's traceback into a worker that trains on or ends well (it read as a crash, and once cut the run's last line
    in two: issue 39). That one case becomes ``wire.WATCHER_STOPPED_LINE`` with its reason, kept in the log file and
    left out of the views; any other exception, of these threads or any other, is printed as before."""
    previous = threading.excepthook
    if getattr(previous, "quiets_pch_watchers", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        name = getattr(args.thread, "name", "") or ""
        if name.startswith(WATCHER_THREADS) and type(args.exc_value).__name__ == "UnavailableError":
            reason = (str(args.exc_value).strip().splitlines() or [""])[0][:200]
            sys.stderr.write(f"{wire.WATCHER_STOPPED_LINE} {name}: {reason}\n")
            sys.stderr.flush()
            return
        previous(args)

    hook.quiets_pch_watchers = True  # type: ignore[attr-defined]
    threading.excepthook = hook


def save_if_preempted(handler: Any) -> None:
    """At a training step: save (through the save function) when a worker got SIGTERM, at the step all agree on."""
    handler.save_checkpoint_if_preempted()


def tell_peers_of_sigterm(handler: Any) -> None:
    """This worker got SIGTERM: tell the others (coordination service), as PCH's own signal handler would."""
    handler._maybe_set_received_own_sigterm()
