"""Which GPUs each worker sees (``CUDA_VISIBLE_DEVICES``), decided without importing TensorFlow."""

from __future__ import annotations

import os
import shutil
import subprocess

NVIDIA_SMI_TIMEOUT = 10.0  # seconds to wait for `nvidia-smi -L`


class GpuAssignmentError(ValueError):
    pass


def visible_gpus(environ: dict[str, str] | None = None) -> list[str]:
    """GPU ids this machine offers the workers: ``CUDA_VISIBLE_DEVICES`` when set, else what nvidia-smi lists."""
    env = os.environ if environ is None else environ
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        ids = [x.strip() for x in listed.split(",") if x.strip()]
        return [] if ids and ids[0].startswith("-") else ids
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def assign_gpus(workers: int, per_worker: int | None, available: list[str]) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` value for each worker; no two workers ever share a GPU.

    ``per_worker`` None: an equal share of what is available (none on a machine without GPUs).
    0: GPUs hidden (``-1``).
    """
    if per_worker is None:
        per_worker = len(available) // workers if available else 0
        if available and per_worker == 0:
            raise GpuAssignmentError(
                f"{workers} workers but only {len(available)} GPU(s) ({','.join(available)}): each worker needs its own."
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
