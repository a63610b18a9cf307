"""``%%worker --detach --session NAME``: a session served by a supervisor process of its own
(magics/sessions/detach/supervisor.py), this kernel, or any later one, its client.

``DetachedSession`` is the kernel's handle: a ``DetachedCluster`` (attach.py: the live widget from the run's
state file, Stop and Restart through its request files, ``%workers stop/logs/wait NAME``) that also runs cells in
the session (``submit``: a ``RemoteCell`` the notebook cell shows as an attached session's), Stops them, pulls and
pushes values, over the session's private channel (magics/sessions/detach/client.py). The session's workers and
their state belong to its supervisor process: a kernel restart, ``kill -9`` or crash leaves them, and a new kernel's
``%%worker --session NAME`` cell runs on them (``detached_session(NAME)`` finds it).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.notebook import registry
from nbworkers.magics.notebook.remote.attach import DetachedCluster
from nbworkers.magics.run.detach.start import start_detached
from nbworkers.magics.rundir.layout import RunNotFound, read_state, request_restart, run_dir_of
from nbworkers.magics.sessions.detach.client import SessionClient, SessionRefused
from nbworkers.magics.sessions.detach.remote_cell import RemoteCell
from nbworkers.magics.sessions.detach.supervisor import SESSION_SUPERVISOR_MODULE
from nbworkers.magics.sessions.pull import PullError
from nbworkers.magics.sessions.push import PushError
from nbworkers.magics.sessions.session import RESTORE_CELL, SessionEnded
from nbworkers.magics.settings import settings
from nbworkers.protocol import session_values


class DetachedSession(DetachedCluster):
    def __init__(self, run_dir: Path):
        super().__init__(run_dir)
        self.client = SessionClient(self.name, self.run_dir)
        self.cells: list[RemoteCell] = []  # the cells this kernel submitted

    # ------------------------------------------------------------------------------ cells
    def submit(self, code: str, timeout: float | None = None, display: str = "0", label: str = "",
               prompt: int | None = None) -> RemoteCell:
        """Queue a cell in the session (it runs once the cells before it, any kernel's, have ended); ``prompt`` as in
        ``Session.submit``."""
        return self._queue("submit", {"code": code, "timeout": timeout, "display": display, "label": label,
                                      "prompt": prompt}, code, display)

    def restore(self) -> RemoteCell:
        """Queue the cell that puts back what the workers saved before the processes last restarted (the session's
        ``restore()``, in its supervisor process). ``SessionRefused`` saying why when nothing was saved."""
        return self._queue("restore", {}, RESTORE_CELL, "0")

    def _queue(self, kind: str, content: dict[str, Any], code: str, display: str) -> RemoteCell:
        """Ask the supervisor to queue a cell (``SessionEnded`` once the session ended); the cell, followed."""
        try:
            answer, _ = self.client.request(kind, content)
        except SessionRefused as error:
            if error.ended:
                raise SessionEnded(str(error)) from None
            raise
        cell = RemoteCell(self, int(answer["number"]), code, display, str(answer.get("label") or ""))
        self.cells.append(cell)
        return cell.start()

    def interrupt(self, cell: Any = None) -> str:
        """Stop the running cell (KeyboardInterrupt on every worker); a queued ``cell`` is cancelled instead."""
        answer, _ = self.client.request("interrupt", {"number": cell.number if cell is not None else None})
        return str(answer["answer"])

    def stop_cell(self) -> str:
        return self.interrupt()

    def restart(self) -> None:
        """Restart the session's processes (their state is lost, but for what the workers still alive save first)."""
        if self.done:
            raise RuntimeError(f"detached session {self.name!r} has ended: `%%worker -n N --detach --session "
                               f"{self.name}` starts it again.")
        request_restart(self.run_dir)

    def wait(self, timeout: float | None = None, raise_on_failure: bool = True, echo: Any = None,
             **kwargs: Any) -> bool:
        """Wait for the last cell this kernel submitted (``RunFailed`` if it failed); without one, for the end."""
        stopping = self._stopper is not None  # `%workers stop NAME`: wait for the session's end
        if not stopping and self.cells and not self.cells[-1].done:
            return self.cells[-1].wait(timeout, raise_on_failure=raise_on_failure, echo=echo)
        return super().wait(timeout)

    # ------------------------------------------------------------------------------ values
    def pull(self, expression: str, worker: int = 0, timeout: float | None = None) -> Any:
        """The value of ``expression`` in ``worker``'s namespace, after the cells submitted before: as
        ``Session.pull`` (JSON and ``.npy`` only), through the session's supervisor process."""
        try:
            answer, blobs = self.client.request("pull", {"expression": expression, "worker": worker,
                                                         "timeout": timeout}, timeout=None)
            return session_values.decode(answer.get("value"), blobs, allow_pickle=False, source="the session's reply")
        except (SessionRefused, session_values.ValueDecodeError) as error:
            raise PullError(str(error)) from None

    def push(self, workers: list[int] | None = None, allow_pickle: bool = False, **values: Any) -> list[int]:
        """Assign each ``name=value`` in the workers' namespaces (numbers, strings, lists, dicts, numpy arrays)."""
        if allow_pickle:
            raise PushError("push(allow_pickle=True): not to a detached session (its supervisor process never "
                            "unpickles); send arrays and JSON values, or save the object to a file the workers read")
        try:
            tree, blobs = session_values.encode(values, allow_pickle=False)
            answer, _ = self.client.request("push", {"values": tree, "workers": workers}, blobs, timeout=None)
        except (SessionRefused, session_values.PullValueError) as error:
            raise PushError(str(error)) from None
        if answer.get("note"):  # its shared memory failed: this push and the next go as frames (said once)
            print(str(answer["note"])[:1000], file=sys.stderr, flush=True)
        return list(answer["workers"])

    # ------------------------------------------------------------------------------ what the views ask
    def _info(self) -> dict[str, Any]:
        try:
            return self.client.request("info", {})[0]
        except SessionRefused:
            return {}

    def live_cells(self) -> str:
        return str(self._info().get("live_cells") or "")

    @property
    def lost_note(self) -> str:
        return str(self._info().get("lost_note") or "")

    @property
    def restarts(self) -> int:
        return int((read_state(self.run_dir) or {}).get("restarts") or 0)

    @property
    def state(self) -> Any:
        """The workers' pids (the widget's Restart waits for new ones)."""
        workers = (read_state(self.run_dir) or {}).get("workers") or []
        return SimpleNamespace(workers=[SimpleNamespace(pid=w.get("pid")) for w in workers],
                               restarts=self.restarts, started=time.time())

    def __repr__(self) -> str:
        return f"<DetachedSession {self.name!r}: {self.status}, {self.run_dir}>"


def start_detached_session(spec: LaunchSpec) -> DetachedSession:
    """Start the session ``spec`` in a supervisor process of its own; its handle (registered)."""
    run_dir = start_detached(spec, settings(), module=SESSION_SUPERVISOR_MODULE)
    session = DetachedSession(run_dir)
    registry.add(session)  # type: ignore[arg-type]  # duck-typed like a Cluster
    return session


def detached_session(name: str) -> DetachedSession | None:
    """The live detached session ``name`` (this kernel's handle, or a new one, registered), else None."""
    try:
        known = registry.get(name)
    except KeyError:
        known = None
    if isinstance(known, DetachedSession):
        return None if known.done else known
    try:
        run_dir = run_dir_of(name)
    except (RunNotFound, LaunchError):
        return None
    state = read_state(run_dir) or {}
    if not (state.get("detached") and state.get("session")):
        return None
    session = DetachedSession(run_dir)
    if session.done:
        return None
    registry.add(session)  # type: ignore[arg-type]
    return session
