"""Processes left under a run root: what a test, the demo or a benchmark checks is gone when it ends.

``processes_under(root)`` finds every live process started for a cluster under the run root ``root`` by its
environment — hosts and workers (``NBWORKERS_RUN_DIR`` under the root), zygotes and the workers they fork
(``NBWORKERS_SPARE`` = the run root of the kernel that started the zygote); ``kill_strays(root)`` SIGKILLs
their process groups (``process_kill``). This process itself is never included. Imports psutil (no TensorFlow).
"""

from __future__ import annotations

import os

import psutil

from nbworkers.procs.kill import kill_process_groups
from nbworkers.procs.ownership import ZYGOTE_MARKER_ENV
from nbworkers.protocol import wire


def processes_under(root: str | os.PathLike) -> list[psutil.Process]:
    """Every live process started for a cluster under the run root ``root`` (see the module docstring)."""
    prefix = str(root)
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        try:
            env = proc.environ()
            marks = (env.get(wire.ENV_RUN_DIR, ""), env.get(ZYGOTE_MARKER_ENV, ""))
            if any(mark.startswith(prefix) for mark in marks) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def kill_strays(root: str | os.PathLike) -> list[int]:
    """SIGKILL the process group of every process left under ``root``, now. Returns their pids."""
    return kill_process_groups(processes_under(root))
