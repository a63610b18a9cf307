"""The command line of a worker host and its worker: ``host [options] -- python bootstrap``.

One place for the modules both are started from, shared by the local backend (``local``) and the Ray node
(``ray/nodes/host_actor``); neither imports the other for it. Standard library only (the Ray node imports it).
"""

from __future__ import annotations

import sys
from typing import IO

from nbworkers.protocol.private.dirs import module_command

HOST_MODULE = "nbworkers.host.worker_host"
BOOTSTRAP_MODULE = "nbworkers.distlib.worker.bootstrap"
ZYGOTE_MODULE = "nbworkers.distlib.worker.zygote"  # a fork server: backends/zygotes.py, ray/nodes/zygote_actor.py
ZYGOTE_READY = ": ready ("  # the zygote's log line once its imports are done (distlib/worker/zygote.py)


def zygote_serving(log_path: str) -> bool:
    """Has the zygote whose log is ``log_path`` said it serves (its imports done)?"""
    try:
        with open(log_path, "rb") as log:
            return ZYGOTE_READY.encode() in log.read()
    except OSError:
        return False


def host_command(python: str, host_args: list[str]) -> list[str]:
    """The host (this interpreter) with ``host_args``, then ``--`` and the worker (``python``, unbuffered); the host
    holds the worker to its cell's end (``--cell-end``: an exit with 0 before it is no finish)."""
    return [
        *module_command(sys.executable, HOST_MODULE, "--cell-end", *host_args),
        "--", *module_command(python, BOOTSTRAP_MODULE, unbuffered=True),
    ]


def tell_host(stdin: IO[bytes] | None, command: str) -> None:
    """Write one of the commands the host reads on its stdin (``stop``, ``stacks``: ``worker_host.main``) to the
    pipe that holds it (a local host's, or the ``srun`` that forwards it to a host on a Slurm node); nothing when
    the pipe is closed or the host gone."""
    if stdin is None:
        return
    try:
        stdin.write(f"{command}\n".encode())
        stdin.flush()
    except (BrokenPipeError, ValueError, OSError):
        pass
