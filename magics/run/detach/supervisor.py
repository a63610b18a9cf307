"""``%%worker --detach``: the supervisor process that runs one run's loop outside the kernel.

One process per run (``python -m nbworkers.magics.run.detach.supervisor``), started by the kernel (``start.py``) in
its own session, so a kernel restart, ``kill -9`` or crash, and a Jupyter server's shutdown, leave it running.
It reads what the run needs from its stdin (the kernel's ``LaunchSpec`` and settings, pickled by the kernel that
started it: nothing from a worker), runs the ordinary ``RunLoop``, answers one JSON line on its stdout (started, or
refused and why), and ends when its run ends. It binds nothing: the relay is the loop's, a Unix socket in the
private runtime directory; the kernel reads the run from ``state.json`` and asks it to stop or restart through the
run directory's request files (rundir/layout.py), as the REST API and the sidebar already do. Its pid is the run's
``kernel_pid`` (liveness.py): while it lives the run is not lost. If it dies, the worker hosts' stdin pipes close
and they stop their workers (host/worker_host.py): nothing is orphaned. TERM, INT and HUP ask the run to stop.
It starts with ``-P`` in a private folder of its own, its stderr a file there, and moves both to its run directory
once the run is started (``start_log.py``).

No IPython, no views (an import contract in pyproject.toml).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Protocol

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.run.detach.start_log import adopt
from nbworkers.magics.settings import WorkerSettings


@dataclass
class DetachRequest:
    """What the kernel hands the supervisor process (pickled, kernel -> its own child)."""

    spec: LaunchSpec
    settings: dict[str, Any]  # WorkerSettings' configurable values
    push: bytes | None = None  # --push, pickled by the kernel: never unpickled here (a kernel's class would not be)
    start_dir: str = ""  # the private folder it starts in, its stderr's file there (start_log.py); "": none


def settings_values(config: WorkerSettings) -> dict[str, Any]:
    """The settings' configurable values (a traitlets object is not sent whole)."""
    return {name: getattr(config, name) for name in config.trait_names(config=True)}


class DetachableLoop(Protocol):
    """What the supervisor needs of a run loop (``RunLoop``; a fake in the unit tests)."""

    run_dir: Any
    detached: bool

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def wait_done(self, timeout: float) -> bool: ...


def serve(request: DetachRequest, make_loop: Callable[[DetachRequest], DetachableLoop], answer: IO[str],
          on_started: Callable[[DetachableLoop], None] = lambda loop: None) -> int:
    """Start the run, answer the kernel, wait for the run's end. Returns the process's exit code."""
    try:
        loop = make_loop(request)
        loop.detached = True
        loop.start()
    except LaunchError as error:  # refused before anything ran: the kernel shows it as a usage error
        answer_kernel(answer, {"ok": False, "launch_error": True, "error": str(error)})
        return 2
    except BaseException:
        answer_kernel(answer, {"ok": False, "launch_error": False, "error": traceback.format_exc()})
        return 1
    answer_kernel(answer, {"ok": True, "run_dir": str(loop.run_dir), "pid": os.getpid()})
    on_started(loop)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            signal.signal(signum, lambda *_: loop.stop())
        except ValueError:  # not the main thread (unit tests)
            pass
    while not loop.wait_done(1.0):
        pass
    return 0


def answer_kernel(stream: IO[str], data: dict[str, Any]) -> None:
    try:
        stream.write(json.dumps(data) + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass  # the kernel went away meanwhile: the run goes on


def _real_loop(request: DetachRequest) -> DetachableLoop:
    import threading

    from nbworkers.magics.run.group_launch import backend_for
    from nbworkers.magics.run.loop import RunLoop

    config = WorkerSettings(**request.settings)
    loop = RunLoop(request.spec, config, backend_for(request.spec), threading.RLock())
    loop.push_pickle = request.push
    return loop


def quiet_outputs(loop: DetachableLoop, start_dir: str = "") -> None:
    """After the answer: stdout to /dev/null, stderr to the run directory's supervisor.log (0600, no link followed,
    after what the start folder's log held), the run directory the working one (``start_log.adopt``)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    adopt(start_dir, loop.run_dir)


def run_supervisor(make_loop: Callable[[DetachRequest], DetachableLoop]) -> int:
    """The process's work: the request from stdin, ``serve`` with ``make_loop`` (a plain run's loop, or a detached
    session's: magics/sessions/detach/supervisor.py)."""
    try:
        request = pickle.load(sys.stdin.buffer)  # the kernel that started this process wrote it
    except Exception:
        request = None
    if not isinstance(request, DetachRequest):
        answer_kernel(sys.stdout, {"ok": False, "launch_error": False, "error": "expected a DetachRequest on stdin"})
        return 2
    return serve(request, make_loop, sys.stdout, lambda loop: quiet_outputs(loop, request.start_dir))


def main() -> int:
    return run_supervisor(_real_loop)


if __name__ == "__main__":  # run as the package's module, so that the pickled DetachRequest is this class
    from nbworkers.magics.run.detach.supervisor import main as package_main

    sys.exit(package_main())
