"""Which collective implementation a worker uses, and the check that every worker sees as many GPUs.

Pure decisions, no TensorFlow: ``strategy()`` and the MultiWorkerMirroredStrategy patch feed them what
TensorFlow reports. NCCL where the worker sees GPUs, RING otherwise, or what the user names. Workers with
unequal GPU counts break MultiWorkerMirroredStrategy's collectives upstream (it assumes every worker has as
many devices as itself), so they get ``GpuCountMismatchError`` before training.

Two sources for the other workers' counts:
- ``NBWORKERS_GPU_COUNTS`` (comma-separated, one count per worker in TF_CONFIG order), set by a launcher that
  knows what it assigned: checked at once, before TensorFlow builds the strategy;
- otherwise an exchange through the coordination service's key-value store right after the strategy is built
  (``worker_facts.exchange``), which needs no launcher support and also works across machines.
"""

from __future__ import annotations

import os

from nbworkers.distlib.cluster import TFConfigError
from nbworkers.protocol import env_settings

ENV_GPU_COUNTS = env_settings.GPU_COUNTS.name
COMMUNICATION_CHOICES = ("auto", "ring", "nccl")


class GpuCountMismatchError(RuntimeError):
    """Workers see different numbers of GPUs (or disagree on the cluster)."""


def choose_implementation(requested: str, local_gpu_count: int) -> str:
    """The ``tf.distribute.experimental.CommunicationImplementation`` member name: "NCCL" or "RING".

    ``requested``: "auto" (NCCL when this worker sees a GPU, else RING), "nccl" or "ring" (any case).
    """
    choice = str(requested).strip().lower()
    if choice not in COMMUNICATION_CHOICES:
        raise ValueError(
            f"communication={requested!r} is not one of {', '.join(COMMUNICATION_CHOICES)}"
            " ('auto' picks NCCL when the worker sees GPUs, RING otherwise)."
        )
    if choice == "auto":
        return "NCCL" if local_gpu_count > 0 else "RING"
    if choice == "nccl" and local_gpu_count == 0:
        raise ValueError(
            "communication='nccl' needs GPUs, but this worker sees none (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}). Use communication='ring' or 'auto' on CPUs."
        )
    return choice.upper()


def check_equal_gpu_counts(counts: list[int], source: str) -> None:
    """Raise GpuCountMismatchError when the per-worker GPU counts differ. ``source`` says where they came from."""
    if len(set(counts)) <= 1:
        return
    listing = ", ".join(f"worker {i}: {n}" for i, n in enumerate(counts))
    raise GpuCountMismatchError(
        f"Workers see different numbers of GPUs ({listing}; from {source}). MultiWorkerMirroredStrategy needs"
        " the same number on every worker, or its collectives hang or fail. Give every worker the same GPUs"
        " (%%worker --gpus-per-worker N, or the same count in each worker's CUDA_VISIBLE_DEVICES), or train on"
        " CPUs with --gpus-per-worker 0."
    )


def gpu_counts_from_env(environ: dict[str, str] | None = None) -> list[int] | None:
    """The per-worker GPU counts a launcher put in NBWORKERS_GPU_COUNTS, or None when it is unset."""
    env = os.environ if environ is None else environ
    text = env.get(ENV_GPU_COUNTS, "").strip()
    if not text:
        return None
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"{ENV_GPU_COUNTS}={text!r} must be comma-separated integers, one per worker (e.g. '1,1').")
    if any(n < 0 for n in counts):
        raise ValueError(f"{ENV_GPU_COUNTS}={text!r} has a negative count.")
    return counts


def check_worker_facts(facts: list[dict]) -> None:
    """Compare what every worker published (``{"devices": n, "device_type": t, "cluster": fp}``): raise
    TFConfigError when their clusters differ, GpuCountMismatchError when their GPU counts do."""
    fingerprints = {f.get("cluster") for f in facts}
    if len(fingerprints) > 1:
        raise TFConfigError(
            "The workers were started with different TF_CONFIG clusters (inconsistent TF_CONFIG): every worker"
            " needs the same 'cluster' and its own 'task'."
        )
    check_equal_gpu_counts(
        [int(f.get("devices", 0)) if f.get("device_type") == "GPU" else 0 for f in facts],
        "the devices each worker's strategy found",
    )
