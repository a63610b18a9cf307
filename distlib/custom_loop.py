"""Helpers for the custom-training-loop tutorial's pattern under MultiWorkerMirroredStrategy.

- ``distributed_dataset``: a per-worker input pipeline through ``distribute_datasets_from_function``: each
  worker shards the examples first (distinct parts), then shuffles, repeats and batches with the
  per-replica batch size (global batch / replicas), so the replicas together consume one global batch.
- ``scale_loss``: per-example losses to the replica's share of the global-batch mean (what
  ``strategy.run`` + summed gradients need).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable


def _call_with_optional_context(dataset_fn: Callable, input_context: Any):
    try:
        takes_context = len(inspect.signature(dataset_fn).parameters) > 0
    except (TypeError, ValueError):
        takes_context = True
    return dataset_fn(input_context) if takes_context else dataset_fn()


def distributed_dataset(
    strategy,
    dataset_fn: Callable,
    global_batch_size: int,
    *,
    shuffle_buffer: int | None = None,
    seed: int | None = None,
    repeat: bool = True,
    drop_remainder: bool = True,
):
    """A distributed dataset whose replicas each get ``global_batch_size / replicas`` examples per step.

    ``dataset_fn()`` (or ``dataset_fn(input_context)``) returns UNBATCHED examples in a fixed order; it runs
    once per worker. ``drop_remainder`` keeps every replica's batch the same size so the loss scaling is
    exact and no worker runs out before the others.
    """
    import tensorflow as tf

    if global_batch_size % strategy.num_replicas_in_sync:
        raise ValueError(
            f"global_batch_size {global_batch_size} is not divisible by the {strategy.num_replicas_in_sync}"
            " replicas; pick a multiple so every replica gets the same batch."
        )

    def per_worker(input_context: tf.distribute.InputContext):
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        dataset = _call_with_optional_context(dataset_fn, input_context)
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if shuffle_buffer:
            dataset = dataset.shuffle(shuffle_buffer, seed=seed)
        if repeat:
            dataset = dataset.repeat()
        return dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)

    return strategy.distribute_datasets_from_function(per_worker)


def scale_loss(per_example_loss, global_batch_size: int, sample_weight=None, regularization_losses=None):
    """This replica's share of the mean loss over the global batch (plus scaled regularization losses).

    Summing it over all replicas (which the gradient all-reduce does) gives the global-batch mean.
    """
    import tensorflow as tf

    loss = tf.nn.compute_average_loss(per_example_loss, sample_weight=sample_weight,
                                      global_batch_size=global_batch_size)
    if regularization_losses:
        loss += tf.nn.scale_regularization_loss(tf.add_n(list(regularization_losses)))
    return loss
