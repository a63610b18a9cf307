"""``%%worker --detach --session NAME``: the supervisor process of a detached session.

As a detached plain run's (magics/run/detach/supervisor.py, whose ``serve`` it uses: the same request on stdin,
the same answer, the same signals and end), with a ``Session`` in place of a bare run loop: the session's
participant, its command and data sockets and its cells live here, and a kernel is its client over the session's
private channel (``server.py``: submit a cell, follow it, Stop it, pull, push). Its pid is the run's
``kernel_pid``; the worker hosts read its pipe as stdin, so if it dies its workers end with it. The channel's
socket and client file are removed when the session ends.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from nbworkers.magics.run.detach.supervisor import DetachRequest, run_supervisor
from nbworkers.magics.sessions.detach.handlers import handle
from nbworkers.magics.sessions.detach.server import SessionServer
from nbworkers.magics.settings import WorkerSettings

SESSION_SUPERVISOR_MODULE = "nbworkers.magics.sessions.detach.supervisor"


class SessionLoop:
    """A detached session as the supervisor's ``serve`` sees a run loop: started, then waited on; its channel's
    server started with it and closed at its end."""

    def __init__(self, session: Any, make_server: Any = SessionServer):
        self.session = session
        self.run_dir: Path = session.run_dir
        self._make_server = make_server
        self.server: Any = None

    @property
    def detached(self) -> bool:
        return bool(self.session.cluster.detached)

    @detached.setter
    def detached(self, value: bool) -> None:
        self.session.cluster.detached = value  # the handle's: it tells each of its runs (run/cluster.py)

    def stop(self) -> None:
        self.session.cluster.stop()

    def wait_done(self, timeout: float) -> bool:
        return self.session.cluster.wait_done(timeout)

    def start(self) -> None:
        self.session.start()
        self.server = self._make_server(self.session.name, self.run_dir,
                                        lambda kind, content, blobs: handle(self.session, kind, content, blobs))
        self.server.start()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def _real_session(request: DetachRequest) -> SessionLoop:
    from nbworkers.magics.sessions.session import Session

    return SessionLoop(Session(request.spec, WorkerSettings(**request.settings)))


def main() -> int:
    loops: list[SessionLoop] = []

    def make(request: DetachRequest) -> SessionLoop:
        loops.append(_real_session(request))
        return loops[-1]

    try:
        return run_supervisor(make)
    finally:
        for loop in loops:
            loop.close()


if __name__ == "__main__":  # run as the package's module, so that the pickled DetachRequest is its class
    from nbworkers.magics.sessions.detach.supervisor import main as package_main

    sys.exit(package_main())
