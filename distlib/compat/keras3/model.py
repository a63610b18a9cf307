"""What ``distlib.fit`` reads of a Keras 3 model and a distributed dataset that Keras and TensorFlow keep private.

- ``strategy_of(model)``: the strategy the model was built under (``TensorFlowTrainer._distribute_strategy``);
- ``is_distributed_dataset(data)``: a distributed dataset, also one TensorFlow does not export a class for
  (``DistributedDataset._input_workers``);
- ``build_before_tracing(model, strategy, distributed)``: create the optimizer's and metrics' variables from one
  replica's element spec (``Trainer._symbolic_build``, ``PerReplicaSpec._value_specs``), as Keras's fit does.

Group ``keras3/model`` in ``internals``.
"""

from __future__ import annotations

from typing import Any

from nbworkers.distlib.compat import internals


def check() -> bool:
    """Warn once when a symbol is gone (the fit may then fail to build the model or to see the dataset)."""
    return internals.available("keras3/model", "distlib.fit may fail to build the model or to recognise the dataset")


def strategy_of(model: Any) -> Any:
    """The strategy ``model`` was created under, or None."""
    return getattr(model, "_distribute_strategy", None)


def is_distributed_dataset(data: Any) -> bool:
    import tensorflow as tf

    return isinstance(data, tf.distribute.DistributedDataset) or hasattr(data, "_input_workers")


def _one_replica_spec(distributed_dataset: Any) -> Any:
    import tensorflow as tf

    def one_replica(spec):
        value_specs = getattr(spec, "_value_specs", None)
        return value_specs[0] if value_specs else spec

    return tf.nest.map_structure(one_replica, distributed_dataset.element_spec)


def build_before_tracing(model: Any, strategy: Any, distributed_dataset: Any) -> None:
    """Create the optimizer and metric variables before the step function is traced (as Keras does)."""
    if hasattr(model, "_symbolic_build"):
        with strategy.scope():
            model._symbolic_build(data_batch=_one_replica_spec(distributed_dataset))
