"""``fit()``: distributed training of a compiled Keras 3 model under MultiWorkerMirroredStrategy.

Keras 3's own ``model.fit`` fails under MultiWorkerMirroredStrategy upstream (keras-team/keras#20585: its
symbolic build and its per-replica output reduction both choke on ``PerReplica`` values). This loop runs the
model's own ``train_step`` (so the compiled loss, optimizer and metrics, and any overridden ``train_step``)
through ``strategy.run`` inside a ``tf.function``, and drives Keras callbacks itself. Keras 3 already scales
the compiled loss to the global batch (it multiplies by 1/replicas) and its optimizer sums the gradients
across replicas, so the update equals one step on the global batch.

Metrics are global: each step's loss and metrics are averaged over every replica of every worker inside
the step function (one small all-reduce of the scalars, batched with the step), so the logs, the History,
the widget and the summary show the values over the global batch, the same on every worker, as tf_keras's
and (with ``compat/keras3/mwms``) Keras 3's own ``model.fit`` do.

Since Keras 3's own ``model.fit`` works under the strategy (``compat/keras3/mwms``), this loop is no longer the only
way. It earns its place as the faster path (``benchmarks/keras_fit.py``: ~1.05-1.2x Keras 3's fit with the fix,
~1.6x tf_keras's here), and with what Keras's fit does not do: ``checkpoint_dir=``
resumes after the last save and, on SIGTERM (preemption), saves at the same step on every worker
(``distlib.preemption``); and a dataset *function* (``input_context -> dataset``) as input.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from nbworkers.distlib import keras_fit_jax
from nbworkers.distlib.checkpoint import TrainingCheckpoint
from nbworkers.distlib.cluster import task
from nbworkers.distlib.compat import tf_keras_callbacks
from nbworkers.distlib.compat.keras3 import model as keras3_model
from nbworkers.distlib.compat.keras3.mwms import global_means
from nbworkers.distlib.reporting import ReportCallback, flush_reports
from nbworkers.distlib.shared_dir import check_shared
from nbworkers.distlib.worker import preemption


class FitError(ValueError):
    """The model, data or arguments given to ``fit`` cannot be trained as asked; the message says why."""


def _is_keras3_model(model: Any) -> bool:
    """Keras 3 on TensorFlow: its models inherit its TensorFlow trainer (``compat.internals.TRAINER``)."""
    return any(
        klass.__name__ == "TensorFlowTrainer" and klass.__module__.startswith("keras.") for klass in type(model).__mro__
    )


def _model_strategy(model: Any):
    import tensorflow as tf

    strategy = keras3_model.strategy_of(model)
    return strategy if strategy is not None else tf.distribute.get_strategy()


def distribute(strategy, data: Any):
    """A distributed dataset from a ``tf.data.Dataset`` (batched with the GLOBAL batch size, auto-sharded),
    a function ``input_context -> dataset`` (batched with the per-replica size), or a distributed dataset."""
    import tensorflow as tf

    if keras3_model.is_distributed_dataset(data):
        return data
    if isinstance(data, tf.data.Dataset):
        return strategy.experimental_distribute_dataset(data)
    if callable(data):
        return strategy.distribute_datasets_from_function(data)
    raise FitError(
        f"fit() takes a tf.data.Dataset, a function (input_context) -> tf.data.Dataset, or a distributed dataset;"
        f" got {type(data).__name__}. Wrap arrays with tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)."
    )


def _make_train_function(model, strategy) -> Callable:
    import tensorflow as tf

    def first_local(value):
        return strategy.experimental_local_results(value)[0]

    def global_values(outputs):
        """Rank-0 outputs (loss, metrics): MEAN over every replica of every worker; others: this worker's first."""
        if strategy.num_replicas_in_sync == 1:
            return tf.nest.map_structure(first_local, outputs)
        return global_means(strategy, outputs, first_local)

    def train_function(iterator):
        data = next(iterator)
        return global_values(strategy.run(model.train_step, args=(data,)))

    return tf.function(train_function, autograph=False, reduce_retracing=True)


def _check_model(model, strategy) -> None:
    if not getattr(model, "compiled", False) or getattr(model, "optimizer", None) is None:
        raise FitError("fit() needs a compiled model: call model.compile(optimizer=..., loss=..., metrics=...) first.")
    if task().in_cluster and keras3_model.strategy_of(model) is None:
        raise FitError(
            "The model was not built under the strategy: create and compile it inside `with strategy.scope():`"
            " (strategy = nbworkers.distlib.strategy()), or its variables are not mirrored across workers."
        )


def fit(
    model,
    dataset_or_fn: Any,
    *,
    epochs: int = 1,
    steps_per_epoch: int | None = None,
    callbacks: list | None = None,
    initial_epoch: int = 0,
    verbose: int = 2,
    report: bool = True,
    checkpoint_dir: str | None = None,
):
    """Train a compiled Keras 3 ``model`` on every worker; returns the ``History``.

    ``dataset_or_fn``: a ``tf.data.Dataset`` batched with the global batch size (auto-sharded across workers),
    or a function ``input_context -> dataset`` batched with ``input_context.get_per_replica_batch_size``.
    ``steps_per_epoch`` is required: every worker must run the same number of steps. A ``ReportCallback``
    is added (unless ``report=False`` or one is given) so the notebook sees the metrics.
    ``checkpoint_dir``: save the model and optimizer after every epoch (the chief writes it, see
    ``TrainingCheckpoint``) and, on start, continue after the last saved epoch: a restarted cluster resumes.
    With it, SIGTERM to a worker (preemption) makes every worker save at the next step and exit with code 42
    (``distlib.preemption``); the restarted run continues at that step.
    tf_keras / Keras 2 models are handed to their own ``model.fit``, which works under
    MultiWorkerMirroredStrategy; with ``checkpoint_dir`` it gets Keras's own ``BackupAndRestore`` (a backup per
    epoch, kept after training) and, with ``steps_per_epoch``, the same save on SIGTERM as above.
    Keras 3 on JAX (``%%worker --framework jax``): Keras's own ``model.fit`` across the processes, with reporting and,
    with ``checkpoint_dir``, a ``BackupAndRestore`` per process (``distlib/keras_fit_jax.py``).
    """
    if keras_fit_jax.applies(model):  # Keras 3 on JAX: its own fit across the processes (distlib/keras_fit_jax.py)
        return keras_fit_jax.fit(model, dataset_or_fn, epochs=epochs, steps_per_epoch=steps_per_epoch,
                                 callbacks=callbacks, initial_epoch=initial_epoch, verbose=verbose, report=report,
                                 checkpoint_dir=checkpoint_dir)
    if not _is_keras3_model(model):  # tf_keras / Keras 2: its own fit works under the strategy
        callbacks = _with_reporting(callbacks, report)
        if checkpoint_dir is not None:
            callbacks = _with_backup_and_restore(model, callbacks, checkpoint_dir, steps_per_epoch)
        return model.fit(
            dataset_or_fn, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks,
            initial_epoch=initial_epoch, verbose=verbose,
        )
    if steps_per_epoch is None or int(steps_per_epoch) < 1:
        raise FitError(
            "fit() needs steps_per_epoch (a positive int): every worker must run the same number of steps or the"
            " collectives hang. For a dataset of N examples: steps_per_epoch = N // global_batch_size."
        )
    steps_per_epoch = int(steps_per_epoch)
    import keras

    strategy = _model_strategy(model)
    _check_model(model, strategy)
    distributed = distribute(strategy, dataset_or_fn)
    keras3_model.check()
    keras3_model.build_before_tracing(model, strategy, distributed)
    checkpoint = None
    start_step = 0
    if checkpoint_dir is not None:
        checkpoint = TrainingCheckpoint(checkpoint_dir, model=model, optimizer=model.optimizer)
        saved_epoch, saved_step = checkpoint.restore_or_initialize()  # after the build: into existing variables
        if saved_step >= steps_per_epoch:  # saved at the end of an epoch (or steps_per_epoch shrank)
            saved_epoch, saved_step = saved_epoch + 1, 0
        if saved_epoch >= initial_epoch and (saved_epoch, saved_step) != (0, 0):
            # a preemption save lands mid-epoch: continue at its step (on fresh data iterators)
            initial_epoch, start_step = saved_epoch, saved_step
    train_function = _make_train_function(model, strategy)
    callback_list = keras.callbacks.CallbackList(
        _with_reporting(callbacks, report),
        add_history=True,
        add_progbar=verbose != 0,
        model=model,
        verbose=verbose,
        epochs=epochs,
        steps=steps_per_epoch,
    )
    model.stop_training = False
    iterator = iter(distributed)
    callback_list.on_train_begin()
    logs: dict[str, Any] = {}
    position = [initial_epoch, start_step]  # the next (epoch, step) to run

    def save_position() -> None:  # a preemption save (SIGTERM), at the step every worker agreed on
        if checkpoint is None:  # (the guard arms saving only with a checkpoint)
            return
        epoch, step = position
        if step >= steps_per_epoch:
            epoch, step = epoch + 1, 0
        checkpoint.epoch.assign(epoch)
        checkpoint.step_in_epoch.assign(step)
        path = checkpoint.save()
        print(f"nbworkers: preemption checkpoint at epoch {epoch + 1}, step {step}: {path or '(non-chief)'}",
              file=sys.stderr, flush=True)

    with _preemption_guard(checkpoint, save_position) as guard:
        for epoch in range(initial_epoch, epochs):
            model.reset_metrics()
            callback_list.on_epoch_begin(epoch)
            for step in range(start_step if epoch == initial_epoch else 0, steps_per_epoch):
                callback_list.on_train_batch_begin(step)
                logs = train_function(iterator)
                position[:] = (epoch, step + 1)
                callback_list.on_train_batch_end(step, logs)
                guard.step_done()
                if model.stop_training:
                    break
            epoch_logs = {name: float(value) for name, value in logs.items()}
            if checkpoint is not None:
                checkpoint.epoch.assign(epoch + 1)  # the next epoch to run
                checkpoint.step_in_epoch.assign(0)
                checkpoint.save()
            callback_list.on_epoch_end(epoch, epoch_logs)
            logs = epoch_logs
            if model.stop_training:
                break
    callback_list.on_train_end(logs)
    flush_reports()
    return model.history


def _preemption_guard(checkpoint, save_fn):
    """Save on SIGTERM (``distlib.preemption``) when there is a checkpoint to save to."""
    return preemption.training(save_fn) if checkpoint is not None else preemption._NoTraining()


def _with_backup_and_restore(model, callbacks: list, checkpoint_dir: str, steps_per_epoch: int | None) -> list:
    """Keras 2's ``BackupAndRestore`` for ``checkpoint_dir`` (unless the caller passed one), saving at the end of
    every epoch, plus a save on SIGTERM at the next step (``distlib.preemption``; Keras 2 turns its own
    ``save_before_preemption`` on only on Google Cloud)."""
    import importlib

    check_shared(checkpoint_dir)  # every worker must read the chief's backup: fail before training otherwise
    keras_module = importlib.import_module(type(model).__module__.split(".")[0])  # tf_keras, or keras 2.x
    backup_class = keras_module.callbacks.BackupAndRestore
    if any(isinstance(c, backup_class) for c in callbacks):
        return callbacks
    if not steps_per_epoch:  # batch-level resumption needs an integer save_freq
        return [*callbacks, backup_class(str(checkpoint_dir), save_freq="epoch", delete_checkpoint=False)]
    # save_freq = steps_per_epoch: a backup at every epoch's last batch, and restores at the saved batch
    backup = backup_class(str(checkpoint_dir), save_freq=int(steps_per_epoch), delete_checkpoint=False)
    return [*callbacks, backup, _save_on_sigterm_callback(keras_module, backup)]


def _save_on_sigterm_callback(keras_module, backup):
    class SaveOnSigterm(keras_module.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            tf_keras_callbacks.on_every_worker(self)  # every worker takes part in the save
            self._guard: Any = None
            self._epoch, self._batch = 0, -1

        def on_train_begin(self, logs=None) -> None:
            self._guard = preemption.training(self._save)
            self._guard.__enter__()

        def on_epoch_begin(self, epoch, logs=None) -> None:
            self._epoch = epoch

        def on_train_batch_end(self, batch, logs=None) -> None:
            self._batch = batch
            if self._guard is not None:
                self._guard.step_done()

        def on_train_end(self, logs=None) -> None:
            guard, self._guard = self._guard, None
            if guard is not None:
                guard.__exit__(None, None, None)

        def _save(self) -> None:  # BackupAndRestore recorded this epoch and batch; restore resumes after them
            tf_keras_callbacks.back_up(backup, self._epoch, self._batch)
            print(f"nbworkers: preemption checkpoint at epoch {self._epoch + 1}, step {self._batch + 1}",
                  file=sys.stderr, flush=True)

    return SaveOnSigterm()


def _with_reporting(callbacks: list | None, report: bool) -> list:
    callbacks = list(callbacks or [])
    if report and not any(isinstance(c, ReportCallback) for c in callbacks):
        callbacks.append(ReportCallback())
    return callbacks
