"""Estimator helpers (``tf.estimator`` exists only up to TensorFlow 2.15).

``run_config(strategy)`` gives a ``tf.estimator.RunConfig`` that trains with the strategy; ``ReportHook()``
is a ``SessionRunHook`` that reports the training loss and global step to the notebook. On TensorFlow 2.16
and later both raise ``EstimatorUnavailableError`` explaining how to make a TensorFlow 2.15 environment
and point ``%%worker --python`` at it.
"""

from __future__ import annotations

from typing import Any

from nbworkers.distlib.reporting import flush_reports, report
from nbworkers.distlib.strategies import strategy as make_strategy

ESTIMATOR_ENV_HOWTO = """\
tf.estimator was removed in TensorFlow 2.16 (this worker runs TensorFlow {version}). Run Estimator cells in
a Python 3.11 environment with TensorFlow 2.15 and point %%worker at its interpreter:
    python3.11 -m venv ~/tf215
    ~/tf215/bin/pip install 'tensorflow-cpu==2.15.*' 'tensorflow-estimator==2.15.*' \
        pyzmq jupyter-client psutil traitlets
    ~/tf215/bin/pip install --no-deps nbworkers        # or: --no-deps -e <nbworkers checkout>
then start the cell with  %%worker -n 2 --python ~/tf215/bin/python
(in a checkout of nbworkers, `make estimator-env` builds such an environment in .venv-tf215)."""


class EstimatorUnavailableError(RuntimeError):
    """This TensorFlow has no tf.estimator (2.16+); the message says how to get a 2.15 environment."""


def require_estimator():
    """The ``tf.estimator`` module, or EstimatorUnavailableError."""
    import tensorflow as tf

    major, minor = (int(part) for part in tf.__version__.split(".")[:2])
    estimator = getattr(tf, "estimator", None) if (major, minor) < (2, 16) else None
    if estimator is None:
        raise EstimatorUnavailableError(ESTIMATOR_ENV_HOWTO.format(version=tf.__version__))
    return estimator


def run_config(strategy=None, model_dir: str | None = None, *, evaluate_distributed: bool = False, **kwargs: Any):
    """``tf.estimator.RunConfig(train_distribute=strategy, model_dir=model_dir, **kwargs)``.

    ``strategy`` None: ``distlib.strategy()`` (MultiWorkerMirroredStrategy under %%worker). A restarted
    cluster continues from the latest checkpoint in ``model_dir``.
    """
    estimator = require_estimator()
    if strategy is None:
        strategy = make_strategy()
    if evaluate_distributed:
        kwargs.setdefault("eval_distribute", strategy)
    return estimator.RunConfig(train_distribute=strategy, model_dir=model_dir, **kwargs)


def ReportHook(every_n_steps: int = 1, loss=None):  # noqa: N802  (a class to the user; built lazily)
    """A ``SessionRunHook`` reporting ``loss`` and the global step every ``every_n_steps`` steps.

    ``loss`` None: the training loss the Estimator registers (the last tensor in the LOSSES collection).
    Pass it in ``tf.estimator.TrainSpec(hooks=[distlib.ReportHook()])``.
    """
    estimator = require_estimator()
    import tensorflow as tf

    class _ReportHook(estimator.SessionRunHook):  # type: ignore[name-defined]  # tf.estimator, loaded at run time
        def __init__(self) -> None:
            self._every = max(1, int(every_n_steps))
            self._loss = loss
            self._global_step = None
            self._last_step = -1

        def begin(self) -> None:
            self._global_step = tf.compat.v1.train.get_global_step()
            if self._loss is None:
                losses = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOSSES)
                self._loss = losses[-1] if losses else None

        def before_run(self, run_context):
            fetches = {"step": self._global_step}
            if self._loss is not None:
                fetches["loss"] = self._loss
            return tf.compat.v1.train.SessionRunArgs(fetches)

        def after_run(self, run_context, run_values) -> None:
            results = run_values.results
            step = int(results["step"])
            self._last_step = step
            if step % self._every == 0:
                metrics: dict[str, Any] = {"loss": float(results["loss"])} if "loss" in results else {}
                report(step=step, **metrics)

        def end(self, session) -> None:
            flush_reports()

    return _ReportHook()
