"""TensorBoard summaries of a ``%%worker`` run, in the run's directory: one folder per worker.

``tensorboard_dir()`` is ``<run dir>/tensorboard/<task>``: ``worker-0`` (the chief when there is no ``--chief``),
``worker-1``, ..., ``chief``, ``evaluator`` (without ``TF_CONFIG``, as under ``--framework jax``: ``worker-<i>`` by
the worker's index); so no worker overwrites another's event files, and
``%workers tensorboard NAME`` (TensorBoard on ``<run dir>/tensorboard``) shows each worker as its own run.
``TensorBoard(**kwargs)`` is the Keras callback of the model's own Keras (tf_keras when ``TF_USE_LEGACY_KERAS=1``,
else Keras 3) writing there; custom loops use ``tf.summary.create_file_writer(distlib.tensorboard_dir())``.

One timeline per session: a session's worker is one process for all its cells, so every ``fit`` cell writes into
the same run folders, and the steps continue instead of starting again at each ``fit``: ``TensorBoard``'s epoch
summaries are numbered after the epochs this process already wrote there (unless the fit starts at a later
``initial_epoch`` itself), and the reports' summaries are at the optimizer's ``iterations`` (its update count,
which every ``fit`` on the same model continues).

``report()``'s metrics are written there too (``<task>/report``), through ``ReportSummaries``: only once
TensorFlow is imported by the cell (a cell without TensorFlow never pays its import), only for the reports that
are sent (throttled), at the optimizer's iterations when the report comes from a Keras callback
(``ReportCallback``, ``distlib.fit``), else at the global step, in eager mode only (an Estimator writes its own
summaries).
``NBWORKERS_TENSORBOARD=0`` turns that off. A sent report costs about 1-2 ms more this way (2 metrics, measured
on this project's machine), at most 4 a second.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from nbworkers.distlib.cluster import task
from nbworkers.protocol import env_settings

ENV_TENSORBOARD = env_settings.TENSORBOARD.name  # "0": report() writes no summaries
SUBDIR = "tensorboard"
REPORT_RUN = "report"


def _task_folder() -> str:
    info = task()
    if info.type in ("chief", "evaluator"):
        return info.type
    if not info.in_cluster and env_settings.WORKER.is_set():  # no TF_CONFIG (--framework jax): the worker's index
        return f"worker-{env_settings.WORKER.get()}"
    return f"{info.type}-{info.index}"


def tensorboard_dir(*parts: str) -> str:
    """This worker's TensorBoard folder in the run's directory (``./tensorboard/...`` outside ``%%worker``)."""
    root = env_settings.RUN_DIR.get() or os.getcwd()
    path = os.path.join(root, SUBDIR, _task_folder(), *parts)
    os.makedirs(path, exist_ok=True)
    return path


def TensorBoard(**kwargs: Any):  # noqa: N802 (a callback class in the user's eyes)
    """``keras.callbacks.TensorBoard(log_dir=tensorboard_dir(), **kwargs)`` of the Keras the cell uses, its epochs
    continuing across the process's ``fit`` calls (a session's cells)."""
    kwargs.setdefault("log_dir", tensorboard_dir())
    if os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True"):
        import tf_keras

        return _continuing(tf_keras.callbacks.TensorBoard)(**kwargs)
    import keras

    return _continuing(keras.callbacks.TensorBoard)(**kwargs)


_epochs_written: dict[str, int] = {}  # log_dir -> epochs this process's fits wrote there (a session's cells)


@functools.cache
def _continuing(base: type) -> type:
    """``base`` (a Keras TensorBoard class) numbering its epoch summaries after those already written."""

    class ContinuingTensorBoard(base):  # type: ignore[valid-type, misc]
        _offset: int | None = None

        def on_train_begin(self, logs=None):
            self._offset = None
            super().on_train_begin(logs)

        def on_epoch_begin(self, epoch, logs=None):
            if self._offset is None:  # a fit from initial_epoch=k past what was written continues as it is
                self._offset = max(0, _epochs_written.get(str(self.log_dir), 0) - epoch)
            super().on_epoch_begin(epoch + self._offset, logs)

        def on_epoch_end(self, epoch, logs=None):
            offset = self._offset or 0
            super().on_epoch_end(epoch + offset, logs)
            key = str(self.log_dir)
            _epochs_written[key] = max(_epochs_written.get(key, 0), epoch + offset + 1)

    ContinuingTensorBoard.__name__ = ContinuingTensorBoard.__qualname__ = "TensorBoard"
    return ContinuingTensorBoard


class ReportSummaries:
    """Writes sent ``report()`` metrics as scalars (lazily: TensorFlow must already be imported), one point per tag
    and step: a value sent again at the same step (a throttled batch's report, then its epoch's at the same
    iteration: seen on a busy machine) is not written twice; a new tag or a changed value at that step is."""

    def __init__(self) -> None:
        self.enabled = env_settings.TENSORBOARD.get() and env_settings.RUN_DIR.is_set()
        self._writer: Any = None
        self._last_step = 0
        self._at_last_step: dict[str, float] = {}  # what was written at _last_step

    def write(self, metrics: dict[str, float], step: int | None, epoch: int | None, steps_total: int | None,
              iterations: Any = None) -> None:
        if not self.enabled or not metrics or "tensorflow" not in sys.modules:
            return
        try:
            tf = sys.modules["tensorflow"]
            if not tf.executing_eagerly():  # inside a graph being built (Estimator hooks): its own summaries apply
                return
            if self._writer is None:
                self._writer = tf.summary.create_file_writer(tensorboard_dir(REPORT_RUN))
            x = _count(iterations)  # the optimizer's updates: continues across fit calls
            x = _global_step(step, epoch, steps_total) if x is None else x
            x = self._last_step + 1 if x is None else x
            if x != self._last_step:
                self._last_step, self._at_last_step = x, {}
            new = {name: value for name, value in metrics.items() if self._at_last_step.get(name) != value}
            if not new:
                return
            self._at_last_step.update(new)
            with self._writer.as_default():
                for name, value in new.items():
                    tf.summary.scalar(name, value, step=x)
            self._writer.flush()
        except Exception as error:  # summaries are a convenience: never break the training they describe
            self.enabled = False
            print(f"nbworkers: report() stopped writing TensorBoard summaries: {error!r}", file=sys.stderr)


def _count(variable: Any) -> int | None:
    """An optimizer's ``iterations`` (a tf / Keras variable) as an int; None when there is none (or it is 0)."""
    if variable is None:
        return None
    try:
        value = variable.numpy() if hasattr(variable, "numpy") else variable
        count = int(value)
    except (TypeError, ValueError):
        return None
    return count if count > 0 else None


def _global_step(step: int | None, epoch: int | None, steps_total: int | None) -> int | None:
    """As the kernel plots it: step s of 1-based epoch e is (e - 1) * steps_total + s."""
    if step is not None and epoch is not None and steps_total:
        return max(epoch - 1, 0) * steps_total + step
    if step is not None:
        return step
    return epoch
