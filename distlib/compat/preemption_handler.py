"""TensorFlow's ``PreemptionCheckpointHandler`` (PCH), as ``distlib.worker.preemption`` uses it: made with our own
save and exit functions, and told of a SIGTERM by our signal thread (PCH's private
``_maybe_set_received_own_sigterm``, which tells the peers through the coordination service). Group
``preemption_handler`` in ``internals``.
"""

from __future__ import annotations

from typing import Any

from nbworkers.distlib.compat import internals


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


def save_if_preempted(handler: Any) -> None:
    """At a training step: save (through the save function) when a worker got SIGTERM, at the step all agree on."""
    handler.save_checkpoint_if_preempted()


def tell_peers_of_sigterm(handler: Any) -> None:
    """This worker got SIGTERM: tell the others (coordination service), as PCH's own signal handler would."""
    handler._maybe_set_received_own_sigterm()
