"""Which GPUs each worker sees (``CUDA_VISIBLE_DEVICES``), decided without importing TensorFlow."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.settings import settings
from nbworkers.protocol import env_settings


class GpuAssignmentError(LaunchError):
    pass


MACHINE_GPUS_ENV = env_settings.VISIBLE_GPUS.name  # set by the nbworkers kernel: the GPUs the workers share
ALL_GPUS = "all"  # its value when the kernel was started without CUDA_VISIBLE_DEVICES


def parse_ids(listed: str) -> list[str]:
    ids = [x.strip() for x in listed.split(",") if x.strip()]
    return [] if ids and ids[0].startswith("-") else ids


def nvidia_smi_gpus(environ: Mapping[str, str]) -> list[str]:
    smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=settings().nvidia_smi_timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """GPU ids the workers share.

    ``NBWORKERS_VISIBLE_GPUS`` first (the nbworkers kernel hides the GPUs from itself and records the
    machine's list there; ``all``: every GPU nvidia-smi lists), then ``CUDA_VISIBLE_DEVICES``, then nvidia-smi.
    """
    env = os.environ if environ is None else environ
    listed = env.get(MACHINE_GPUS_ENV)
    if listed is None:
        listed = env.get("CUDA_VISIBLE_DEVICES")
    elif listed.strip() == ALL_GPUS:
        listed = None
    if listed is not None:
        return parse_ids(listed)
    return nvidia_smi_gpus(env)


def assign_gpus(workers: int, per_worker: int | None, available: list[str]) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` value for each worker; no two workers ever share a GPU.

    ``per_worker`` None: an equal share of what is available (none on a machine without GPUs).
    0: GPUs hidden (``-1``).
    """
    if per_worker is None:
        per_worker = len(available) // workers if available else 0
        if available and per_worker == 0:
            raise GpuAssignmentError(
                f"{workers} workers but only {len(available)} GPU(s) ({','.join(available)}): each worker needs its"
                " own."
                " Use fewer workers, or --gpus-per-worker 0 to train on the CPU."
            )
    if per_worker == 0:
        return ["-1"] * workers
    if workers * per_worker > len(available):
        raise GpuAssignmentError(
            f"--gpus-per-worker {per_worker} with {workers} workers needs {workers * per_worker} GPUs,"
            f" but {len(available)} are visible ({','.join(available) or 'none'})."
            " Lower -n or --gpus-per-worker, or use --gpus-per-worker 0 to train on the CPU."
        )
    return [",".join(available[i * per_worker : (i + 1) * per_worker]) for i in range(workers)]
