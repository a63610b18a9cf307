"""tf_keras's private callback protocol, for nbworkers' own callbacks.

tf_keras's ``CallbackList`` reads ``_supports_tf_logs`` (tensors in the logs are fine), ``_chief_worker_only``
(whether the callback runs on the chief only) and asks ``_implements_*_batch_hooks()`` which batch hooks a
callback has. ``TfKerasProtocol`` declares them for a callback that runs on every worker and has train-batch
hooks only (``distlib.ReportCallback``). ``back_up(backup, epoch, batch)`` writes tf_keras's
``BackupAndRestore`` state at a step (the preemption save of ``distlib.fit``). Group ``tf_keras_callbacks``.
"""

from __future__ import annotations

from typing import Any

from nbworkers.distlib.compat import internals


class TfKerasProtocol:
    """Mixed into a callback that runs on every worker (each reports its own card) with train-batch hooks only."""

    _supports_tf_logs = True  # tensors are fine (converted only when a report is sent)
    _chief_worker_only = None  # run on every worker

    def _implements_train_batch_hooks(self) -> bool:
        return True

    def _implements_test_batch_hooks(self) -> bool:
        return False

    def _implements_predict_batch_hooks(self) -> bool:
        return False


def on_every_worker(callback: Any) -> None:
    """Mark a tf_keras ``Callback`` subclass instance to run on every worker (not the chief only)."""
    internals.available("tf_keras_callbacks", "saving on SIGTERM may fail for tf_keras's BackupAndRestore")
    callback._supports_tf_logs = True
    callback._chief_worker_only = False  # every worker takes part in the save


def back_up(backup: Any, epoch: int, batch: int) -> None:
    """Make tf_keras's ``BackupAndRestore`` record ``epoch`` and ``batch`` (a restore resumes after them)."""
    backup._training_state.back_up(epoch=epoch, batch=batch)
