"""The nbworkers kernel's entry point: ``python -m nbworkers.kernelspec.launch -f CONNECTION_FILE [...]``.

Before ipykernel starts, it hides the GPUs from the kernel process and records the list the workers share:

- ``NBWORKERS_VISIBLE_GPUS`` := the ``CUDA_VISIBLE_DEVICES`` the kernel was started with, or ``all`` when that
  was unset (every GPU ``nvidia-smi`` lists); left alone when already set (a kernel started by a kernel);
- ``CUDA_VISIBLE_DEVICES`` := ``-1`` for the kernel itself.

The workers' ``CUDA_VISIBLE_DEVICES`` are computed from ``NBWORKERS_VISIBLE_GPUS`` (see ``worker_gpu_pool``).
Everything else is what ``ipykernel_launcher`` does. Imports neither TensorFlow nor IPython before the kernel.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from nbworkers.magics.launch.gpus import ALL_GPUS, MACHINE_GPUS_ENV, visible_gpus

HIDDEN = "-1"


def kernel_gpu_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to set in the kernel process so that it sees no GPU and the workers still get theirs."""
    updates = {"CUDA_VISIBLE_DEVICES": HIDDEN}
    if MACHINE_GPUS_ENV not in environ:
        inherited = environ.get("CUDA_VISIBLE_DEVICES")
        updates[MACHINE_GPUS_ENV] = ALL_GPUS if inherited is None else inherited
    return updates


def worker_gpu_pool(environ: Mapping[str, str] | None = None) -> list[str]:
    """GPU ids the workers share: see ``nbworkers.magics.launch.gpus.visible_gpus``."""
    return visible_gpus(environ)


def main() -> None:
    os.environ.update(kernel_gpu_environ(os.environ))
    # As ipykernel_launcher: drop the cwd from sys.path while loading; IPython adds it back for the user.
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
