"""A detached session's cell as a kernel sees it: what ``%%worker --detach --session NAME`` returns.

It has the surface of an attached session's ``SessionCell`` that the views, the magic and a blocking wait use
(``name``, ``number``, ``state``, ``error``, ``snapshot()``, ``stop()``, ``restart()``, ``wait()``, ``show()``,
``outputs``, ``value``), filled from the session's supervisor process: a thread of this kernel asks it for the cell's
picture every ``flush_interval`` seconds (``cell`` requests: its snapshot, the rich outputs not fetched yet, its
value once it ended) until the cell ended, and refreshes the cell's views from it, as the session's loop does for
an attached cell. So the notebook cell shows the same live widget, the same rich outputs under it (or, with
``--block``, written into the cell with the workers' lines) and the same ``RunFailed`` with the traceback.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Protocol

from nbworkers.magics.errors import RunFailed
from nbworkers.magics.run.outputs import LiveViews, Waits, final_snapshot
from nbworkers.magics.sessions.detach.client import SessionClient, SessionRefused
from nbworkers.magics.shapes import ClusterSnapshot
from nbworkers.magics.views.rich import LiveOutputs, RichItem, RichPublisher, WorkersValue
from nbworkers.protocol.statuses import CellState, ClusterStatus, ViewStatus


class CellOwner(Protocol):
    """The kernel's handle on the detached session (``notebook/remote/detached_session.py``; faked in unit tests)."""

    name: str
    client: SessionClient
    settings: Any

    @property
    def done(self) -> bool:
        """The session's run is over (its state file says so, or its supervisor is gone)."""

    def interrupt(self, cell: Any = None) -> str: ...

    def restart(self) -> None: ...


class RemoteCell:
    def __init__(self, session: CellOwner, number: int, code: str, display: str = "0", label: str = ""):
        self.session, self.number, self.code, self.display = session, number, code, display
        self.label = label or f"cell {number}"  # what the views call it (the supervisor's cell says)
        self.name = f"{session.name} {self.label}"
        self.outputs: list[RichItem] = []
        self.results: dict[int, RichItem] = {}
        self.outputs_dropped = 0
        self.blocking = False  # run with --block: the wait publishes the rich outputs into the notebook cell
        self.echoed = False  # a blocking wait writes the workers' lines into the notebook cell
        self.state = CellState.QUEUED.value
        self.error = ""
        self.failed_workers: tuple[int, ...] = ()
        self._failure_text = ""
        self._snapshot: ClusterSnapshot = {"name": self.name, "status": ViewStatus.QUEUED, "workers": []}  # type: ignore
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._views = LiveViews()
        self._waits = Waits()
        self._live: LiveOutputs | None = None
        self._poller: threading.Thread | None = None

    # ------------------------------------------------------------------------------ fetched from the supervisor
    def start(self) -> "RemoteCell":
        """Follow the cell from a thread of its own until it ended."""
        self._poller = threading.Thread(target=self._follow, daemon=True, name=f"nbworkers-follow-{self.name}")
        self._poller.start()
        return self

    def _follow(self) -> None:
        interval = self.session.settings.flush_interval
        while True:
            self.fetch()
            if not self._waits.any:
                self._views.refresh(self.snapshot)
            if self._live is not None:
                self._live.add(list(self.outputs))
            if self._done.wait(interval):
                break
        if self._live is not None and self.results:
            self._live.add_value(WorkersValue(self.results))
        if not self._waits.any:
            self.finish_views()

    def fetch(self) -> None:
        """Ask the supervisor for the cell's picture (the rich outputs not fetched yet: several answers if many)."""
        while not self._done.is_set():
            try:
                answer, blobs = self.session.client.request("cell", {"number": self.number,
                                                                     "outputs_from": len(self.outputs)})
            except SessionRefused as error:  # SessionGone too: the supervisor ended or died meanwhile
                if error.ended or self.session.done:
                    self._lose(str(error))
                return  # a request that failed while the session runs (a loaded machine): asked again next time
            picture = json.loads(bytes(blobs[0])) if blobs else {}
            with self._lock:
                self._snapshot = picture.get("snapshot") or self._snapshot
                self.outputs.extend(RichItem(int(o["worker"]), o["data"], o.get("metadata") or {})
                                    for o in picture.get("outputs") or [])
                self.outputs_dropped = int(answer.get("outputs_dropped") or 0)
                self.state, self.error = str(answer.get("state")), str(answer.get("error") or "")
                self.failed_workers = tuple(answer.get("failed_workers") or ())
                self._failure_text = str(answer.get("failure_text") or "")
                if answer.get("done"):
                    self.results = {int(w): RichItem(int(r["worker"]), r["data"], r.get("metadata") or {})
                                    for w, r in (picture.get("results") or {}).items()}
                    self._done.set()
                    return
                more = bool(picture.get("outputs"))
            if not more:
                return

    def _lose(self, why: str) -> None:
        with self._lock:
            self.state, self.error = CellState.LOST.value, why
            self._failure_text = f"session {self.session.name!r} {self.label}: {why}"
            self._snapshot = {**self._snapshot, "status": ClusterStatus.LOST, "error": why}  # type: ignore[typeddict-item]
        self._done.set()

    # ------------------------------------------------------------------------------ what views and the magic read
    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def status(self) -> str:
        return str(self._snapshot.get("status") or self.state)

    def snapshot(self) -> ClusterSnapshot:
        with self._lock:
            return dict(self._snapshot)  # type: ignore[return-value]

    @property
    def value(self) -> WorkersValue | None:
        """The cell's last expression (worker 0's, the others' where they differ), or None when it had none."""
        return WorkersValue(self.results) if self.results else None

    def failure_text(self) -> str:
        return self._failure_text or f"session {self.session.name!r} {self.label} failed: {self.error}"

    # ------------------------------------------------------------------------------ user-facing
    def stop(self) -> None:
        """Interrupt this cell on every worker (a second Stop restarts the session's processes)."""
        self.session.interrupt(self)

    def restart(self) -> None:
        self.session.restart()

    def wait(self, timeout: float | None = None, raise_on_failure: bool = True, echo: Any = None) -> bool:
        """Block until the cell ends (True) or ``timeout`` passes (False), as ``SessionCell.wait``: the views
        refreshed meanwhile, then the final summary; ``RunFailed`` if it failed (unless ``raise_on_failure=False``)."""
        publisher = None
        if echo is not None and self._live is None:
            publisher = RichPublisher(label_workers=self.display == "all")
        if self._poller is None:
            self.start()

        def tick() -> None:
            self._views.refresh(self.snapshot)
            if echo is not None:
                echo.tick(self.snapshot())
            if publisher is not None:
                publisher.tick(list(self.outputs))

        def finish() -> None:
            if publisher is not None:
                publisher.tick(list(self.outputs))
            self.finish_views(error_below=raise_on_failure, echoed=echo is not None)

        ended = self._waits.wait(self._done, timeout, self.session.settings.flush_interval, tick, echo, self.snapshot,
                                 finish)
        if raise_on_failure and ended and self.state in (CellState.FAILED, CellState.LOST):
            raise RunFailed(self.failure_text(), name=self.session.name, workers=self.failed_workers)
        return ended

    def show(self) -> Any:
        from nbworkers.magics.views.session_widget import session_view_factory

        view = session_view_factory(self)
        self._views.add(view)
        view.show()
        if not self.blocking and self._live is None:
            try:
                self._live = LiveOutputs(label_workers=self.display == "all")
                self._live.show()
            except ImportError:  # no ipywidgets
                self._live = None
        if self.done and not self._waits.any:  # (a coming wait leaves the final summary)
            view.finish(self.snapshot())
        return view

    def waited(self) -> Any:
        """``with cell.waited(): cell.show(); cell.wait()``: the cell's end leaves its final summary to the wait."""
        return self._waits.coming()

    def show_outputs(self) -> None:
        RichPublisher(label_workers=self.display == "all").tick(list(self.outputs))

    def finish_views(self, error_below: bool = False, echoed: bool = False) -> None:
        self._views.finish(lambda: final_snapshot(self.snapshot(), error_below, echoed))

    def _ipython_display_(self) -> None:
        self.show()

    def __repr__(self) -> str:
        return f"<RemoteCell {self.name!r}: {self.state}>"
