"""``fit()``: distributed training of a compiled Keras 3 model under MultiWorkerMirroredStrategy.

Keras 3's own ``model.fit`` fails under MultiWorkerMirroredStrategy upstream (keras-team/keras#20585: its
symbolic build and its per-replica output reduction both choke on ``PerReplica`` values). This loop runs the
model's own ``train_step`` (so the compiled loss, optimizer and metrics, and any overridden ``train_step``)
through ``strategy.run`` inside a ``tf.function``, and drives Keras callbacks itself. Keras 3 already scales
the compiled loss to the global batch (it multiplies by 1/replicas) and its optimizer sums the gradients
across replicas, so the update equals one step on the global batch.

Metrics in the logs are this worker's own running values (as tf_keras's fit shows them); no extra
collective per step.
"""

from __future__ import annotations

from typing import Any, Callable

from nbworkers.distlib.reporting import ReportCallback, flush_reports


class FitError(ValueError):
    """The model, data or arguments given to ``fit`` cannot be trained as asked; the message says why."""


def _is_keras3_model(model: Any) -> bool:
    """Keras 3 on TensorFlow (its models inherit keras.src.backend.tensorflow.trainer.TensorFlowTrainer)."""
    return any(
        klass.__name__ == "TensorFlowTrainer" and klass.__module__.startswith("keras.") for klass in type(model).__mro__
    )


def _model_strategy(model: Any):
    import tensorflow as tf

    strategy = getattr(model, "_distribute_strategy", None)
    return strategy if strategy is not None else tf.distribute.get_strategy()


def distribute(strategy, data: Any):
    """A distributed dataset from a ``tf.data.Dataset`` (batched with the GLOBAL batch size, auto-sharded),
    a function ``input_context -> dataset`` (batched with the per-replica size), or a distributed dataset."""
    import tensorflow as tf

    if isinstance(data, tf.distribute.DistributedDataset) or hasattr(data, "_input_workers"):
        return data
    if isinstance(data, tf.data.Dataset):
        return strategy.experimental_distribute_dataset(data)
    if callable(data):
        return strategy.distribute_datasets_from_function(data)
    raise FitError(
        f"fit() takes a tf.data.Dataset, a function (input_context) -> tf.data.Dataset, or a distributed dataset;"
        f" got {type(data).__name__}. Wrap arrays with tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)."
    )


def _local_batch_spec(distributed_dataset):
    """The element spec of one replica's batch (for Keras's symbolic build)."""
    import tensorflow as tf

    def one_replica(spec):
        value_specs = getattr(spec, "_value_specs", None)
        return value_specs[0] if value_specs else spec

    return tf.nest.map_structure(one_replica, distributed_dataset.element_spec)


def _make_train_function(model, strategy) -> Callable:
    import tensorflow as tf

    def local_values(outputs):
        return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], outputs)

    def train_function(iterator):
        data = next(iterator)
        return local_values(strategy.run(model.train_step, args=(data,)))

    return tf.function(train_function, autograph=False, reduce_retracing=True)


def _check_model(model, strategy) -> None:
    from nbworkers.distlib.cluster import task

    if not getattr(model, "compiled", False) or getattr(model, "optimizer", None) is None:
        raise FitError("fit() needs a compiled model: call model.compile(optimizer=..., loss=..., metrics=...) first.")
    if task().in_cluster and getattr(model, "_distribute_strategy", None) is None:
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
    tf_keras / Keras 2 models are handed to their own ``model.fit``, which works under
    MultiWorkerMirroredStrategy (use its ``BackupAndRestore`` callback for restarts there).
    """
    if not _is_keras3_model(model):  # tf_keras / Keras 2: its own fit works under the strategy
        return model.fit(
            dataset_or_fn, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=_with_reporting(callbacks, report),
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
    if hasattr(model, "_symbolic_build"):  # create optimizer/metric variables before tracing (as Keras does)
        with strategy.scope():
            model._symbolic_build(data_batch=_local_batch_spec(distributed))
    checkpoint = None
    if checkpoint_dir is not None:
        from nbworkers.distlib.checkpoint import TrainingCheckpoint

        checkpoint = TrainingCheckpoint(checkpoint_dir, model=model, optimizer=model.optimizer)
        saved_epoch, _ = checkpoint.restore_or_initialize()  # after the build: restored into existing variables
        initial_epoch = max(initial_epoch, saved_epoch)
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
    for epoch in range(initial_epoch, epochs):
        model.reset_metrics()
        callback_list.on_epoch_begin(epoch)
        for step in range(steps_per_epoch):
            callback_list.on_train_batch_begin(step)
            logs = train_function(iterator)
            callback_list.on_train_batch_end(step, logs)
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


def _with_reporting(callbacks: list | None, report: bool) -> list:
    callbacks = list(callbacks or [])
    if report and not any(isinstance(c, ReportCallback) for c in callbacks):
        callbacks.append(ReportCallback())
    return callbacks
