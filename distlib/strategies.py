"""``strategy()``: the tf.distribute strategy for this worker.

With a TF_CONFIG cluster: MultiWorkerMirroredStrategy with collective communication options (NCCL when
this worker sees GPUs, RING otherwise, or what the caller names). Without TF_CONFIG: a single-process
MirroredStrategy over the local devices, so the same cell runs outside %%worker for debugging.
With parameter servers in the cluster (``%%worker --ps N``): ParameterServerStrategy on the chief (the
coordinator); on the evaluator (outside the training cluster): a local MirroredStrategy.
"""

from __future__ import annotations

from nbworkers.distlib import collectives
from nbworkers.distlib.cluster import task
from nbworkers.distlib.compat.keras3 import fit_guard
from nbworkers.distlib.worker.mwms import strategy_setup
from nbworkers.distlib.worker.roles import role_strategy
from nbworkers.protocol import env_settings


class NotATensorFlowRun(RuntimeError):
    """``strategy()`` in a run of another framework (``%%worker --framework jax``): the message says what to use."""


def local_gpu_count() -> int:
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def communication_options(implementation: str):
    """``tf.distribute.experimental.CommunicationOptions`` for "NCCL" / "RING"."""
    import tensorflow as tf

    member = getattr(tf.distribute.experimental.CommunicationImplementation, implementation)
    return tf.distribute.experimental.CommunicationOptions(implementation=member)


def strategy(communication: str = "auto"):
    """MultiWorkerMirroredStrategy for this %%worker cluster (or a local MirroredStrategy without TF_CONFIG).

    ``communication``: "auto" (NCCL with GPUs, else RING), "nccl" or "ring". A broken TF_CONFIG raises
    ``TFConfigError``; workers with unequal GPU counts raise ``GpuCountMismatchError`` before training.
    """
    framework = env_settings.FRAMEWORK.get()
    if framework != "tf":  # its workers have no TF_CONFIG: a strategy here would train each process on its own
        raise NotATensorFlowRun(
            f"distlib.strategy() is TensorFlow's, and this run is --framework {framework}: its workers joined their "
            "group before the cell (Keras 3 on JAX: a DataParallel distribution is set), so build and fit the model "
            "without a strategy scope (distlib.fit or model.fit)")
    info = task()  # validates TF_CONFIG before TensorFlow sees it
    if info.uses_parameter_servers or info.is_evaluator:  # ParameterServerStrategy / the evaluator: distlib.roles

        return role_strategy(info)
    counts = collectives.gpu_counts_from_env()
    if counts is not None:
        collectives.check_equal_gpu_counts(counts, collectives.ENV_GPU_COUNTS)

    fit_guard.install_fit_guard()
    import tensorflow as tf

    strategy_setup.install()  # status reports + the cross-worker device check on every MWMS, ours or the user's
    implementation = collectives.choose_implementation(communication, local_gpu_count())
    if not info.in_cluster:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=communication_options(implementation))
