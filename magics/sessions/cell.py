"""One cell run in a session: its own per-worker output, status and metrics, its live views, its wait.

``SessionCell`` is what ``%%worker --session NAME`` returns. It looks like a cluster to the views
(``name``, ``snapshot()``, ``stop()``, ``restart()``), so the widget and the text/HTML view show it unchanged;
its snapshot adds ``session: {name, cell, state, cells, running}`` (the widget's header line shows it).
Its lifecycle (state, error, each worker's end) is the session core's ``CellRecord`` (``sessions/core/cells.py``);
the session carries the core's actions into it (``begin``, ``feed_log``, ``worker_ended``, ``conclude``, ``end``).
"""

from __future__ import annotations

import re
import sys
import threading
import time
import traceback
from typing import Any

from nbworkers.magics.backends.isolation import isolation_fact
from nbworkers.magics.errors import RunFailed
from nbworkers.magics.run.core.state import WorkerState
from nbworkers.magics.run.outputs import Waits
from nbworkers.magics.sessions.core import CellRecord
from nbworkers.magics.sessions.core.events import WorkerEnd
from nbworkers.magics.shapes import ClusterSnapshot, WorkerSnapshot
from nbworkers.magics.views.rich import LiveOutputs, RichItem, RichPublisher, WorkersValue
from nbworkers.protocol import session_wire
from nbworkers.protocol.statuses import CellEnd, CellState, ClusterStatus, ViewStatus, WorkerStatus

QUEUED = ViewStatus.QUEUED.value  # what a queued cell's view and cards say (the widget has a label for it)
NEW_PROCESSES_POLL = 0.2  # s between looks for the new processes of a restart that ended a cell


class SessionCell:
    def __init__(self, session: Any, record: CellRecord, code: str, display: str = "0", label: str = ""):
        self.session = session
        self.display = display  # "0": rich output from worker 0; "all": from every worker (--display)
        self.outputs: list[RichItem] = []  # display(...), plt.show(): what the notebook cell shows
        self.results: dict[int, RichItem] = {}  # worker -> the bundle of the cell's last expression
        self.outputs_dropped = 0  # over display_max_outputs
        self.blocking = False  # run with --block: the wait publishes the rich outputs into the notebook cell
        self._live: LiveOutputs | None = None  # else: they go to an Output widget under the cell's view
        self.restored = ""  # saved state put back at its end, over what its code built (the workers' RESTORED line)
        self.echoed = False  # a blocking wait writes the workers' lines into the notebook cell: the widget's log hides
        self.record = record  # the session core's: state, error, failed workers, each worker's end
        self.code = code
        # what the views call it: "cell 3" for a user's cell (the core's number for it: nbworkers' own cells use up
        # none); nbworkers' own (``%workers restore``) by what it does
        self.label = label or record.title
        self.name = f"{session.name} {self.label}"
        self.submitted = time.time()
        self.started: float | None = None  # wall times, for the views
        self.ended: float | None = None
        self.workers = [
            WorkerState(index=w.index, role=w.role, role_index=w.role_index, log_path=w.log_path)
            for w in session.state.workers
        ]
        for worker in self.workers:
            worker.log_tail = type(worker.log_tail)(session.settings.log_tail_lines)
        self._held_stops: dict[int, WorkerEnd] = {}  # workers that stopped; shown once every worker has
        self._views: list[Any] = []
        self._views_lock = threading.Lock()
        self._finished_with: tuple[bool, bool] | None = None  # the views' last finish (error_below, echoed)
        self._done = threading.Event()
        self._waits = Waits()  # wait() calls refreshing the views themselves
        self.dirty = True
        self._flushed = 0.0  # monotonic time the session last refreshed this cell's views

    # ------------------------------------------------------------------------------ the core's record
    @property
    def number(self) -> int:
        return self.record.number

    @property
    def timeout(self) -> float | None:
        return self.record.timeout

    @property
    def state(self) -> str:
        """A ``CellState`` value, as a plain string (``repr`` and JSON show it as the views do)."""
        return self.record.state.value

    @property
    def error(self) -> str:
        return self.record.error

    @property
    def failed_workers(self) -> tuple[int, ...]:
        return self.record.failed_workers

    @property
    def ends(self) -> dict[int, WorkerEnd]:
        return self.record.ends

    # ------------------------------------------------------------------------------ what views read
    @property
    def status(self) -> str:
        return self.record.state.view_status.value

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def snapshot(self) -> ClusterSnapshot:
        with self.session.lock:
            return self._snapshot()

    def _snapshot(self) -> ClusterSnapshot:
        first_line = self.label if self.record.shown is None else next(
            (line.strip() for line in self.code.splitlines() if line.strip()), "")
        end = self.ended or time.time()
        queued = self.record.state == CellState.QUEUED  # says "queued", not "starting": it waits for others
        # a card's restarts are its process's (the session's), as the header's
        workers: list[WorkerSnapshot] = [{**w.snapshot(), "pid": p.pid, "host": p.host, "restarts": p.restarts}
                                         for w, p in zip(self.workers, self.session.state.workers)]
        for worker in workers if queued else []:
            worker["status"] = QUEUED
        return {
            "name": self.name,
            "backend": self.session.state.backend,
            "status": QUEUED if queued else self.status,
            "error": self.error,
            "started": self.started or self.submitted,
            "ended": self.ended,
            "wall_time": end - (self.started or self.submitted) if self.started else 0.0,
            "restarts": self.session.state.restarts,
            "restart_causes": [],
            "restart_history": [],
            "failure_kind": "",
            "generation": self.session.state.generation,
            "run_dir": self.session.state.run_dir,
            "dropped": {},
            "isolation": isolation_fact(self.session.backend),  # the session's (backends/isolation.py)
            "kernel_pid": self.session.state.kernel_pid,
            "kernel_id": self.session.state.kernel_id,
            "workers": workers,
            "session": {"name": self.session.name, "cell": self.record.ref or self.number, "label": self.label,
                        "state": self.state, "cells": self.session.user_cells, "running": first_line[:120],
                        "live_cells": self.session.live_cells(), "echoed": self.echoed,
                        "restored": self.restored},
        }

    # ------------------------------------------------------------------------------ user-facing
    def stop(self) -> None:
        """Interrupt this cell on every worker (a second Stop restarts the session's processes)."""
        self.session.interrupt(self)

    def restart(self) -> None:
        """Restart the session's processes (every variable in them is lost)."""
        self.session.restart()

    def wait(self, timeout: float | None = None, raise_on_failure: bool = True, echo: Any = None) -> bool:
        """Block until the cell ends (True) or ``timeout`` passes (False); refresh the views meanwhile and leave
        the final summary. A failed cell raises ``RunFailed`` (unless ``raise_on_failure=False``). ``echo``: a
        ``magics.echo.WorkerEcho`` writing the workers' output into the notebook cell as it comes."""
        publisher = None  # the rich outputs: into the waiting notebook cell, unless the cell's view has its own
        if echo is not None and self._live is None:
            publisher = RichPublisher(label_workers=self.display == "all")

        def tick() -> None:
            if self.dirty:
                self.refresh_views()
            if echo is not None:
                echo.tick(self.snapshot())
            if publisher is not None:
                publisher.tick(self.outputs)

        def finish() -> None:
            if publisher is not None:
                publisher.tick(self.outputs)
            self.finish_views(error_below=raise_on_failure, echoed=echo is not None)

        ended = self._waits.wait(self._done, timeout, self.session.settings.flush_interval, tick, echo, self.snapshot,
                                 finish)
        if not ended and publisher is not None:
            publisher.tick(self.outputs)
        if raise_on_failure and ended and self.state == CellState.FAILED:
            raise RunFailed(self.failure_text(), name=self.session.name, workers=self.failed_workers)
        return ended

    @property
    def value(self) -> WorkersValue | None:
        """The cell's last expression (worker 0's, the others' where they differ), or None when it had none."""
        with self.session.lock:
            return WorkersValue(self.results) if self.results else None

    def show_outputs(self) -> None:
        """Publish the rich outputs the workers sent (``display``, ``plt.show()``) into the current notebook cell:
        a cell run without ``--block`` keeps them here."""
        RichPublisher(label_workers=self.display == "all").tick(list(self.outputs))

    def add_rich(self, worker: int, source: str, data: dict[str, Any], metadata: dict[str, Any], limit: int) -> bool:
        """A worker's bundle for this cell (lock held); False when over ``limit`` outputs (dropped, counted)."""
        item = RichItem(worker, data, metadata)
        if source == "result":
            self.results[worker] = item
            return True
        if len(self.outputs) >= limit:
            self.outputs_dropped += 1
            return False
        self.outputs.append(item)
        if self._live is not None:
            self._live.add(self.outputs)
        return True

    def failure_text(self) -> str:
        return f"session {self.session.name!r} {self.label} failed: {self.error}"

    def __repr__(self) -> str:
        return f"<SessionCell {self.name!r}: {self.state}>"

    def _ipython_display_(self) -> None:
        self.show()

    def show(self) -> Any:
        from nbworkers.magics.views.session_widget import session_view_factory

        view = session_view_factory(self)
        with self._views_lock:
            self._views.append(view)
        view.show()
        if not self.blocking and self._live is None:
            self._show_live_outputs()
        if self._done.is_set() and not self._waits.any:  # (a coming wait leaves the final summary)
            view.finish(self.snapshot())
        return view

    def waited(self) -> Any:
        """``with cell.waited(): cell.show(); cell.wait()``: the cell's end leaves its final summary to the wait."""
        return self._waits.coming()

    def _show_live_outputs(self) -> None:
        try:
            live = LiveOutputs(label_workers=self.display == "all")
        except ImportError:  # no ipywidgets: cell.show_outputs() still shows them
            return
        live.show()
        with self.session.lock:
            self._live = live
            live.add(self.outputs)
            if self.record.state.is_terminal and self.results:
                live.add_value(WorkersValue(self.results))

    # ------------------------------------------------------------------------------ fed by the session (lock held)
    def begin(self) -> None:
        """The core dispatched the cell: every worker runs it."""
        self.started = time.time()
        for worker in self.workers:
            worker.status = WorkerStatus.RUNNING
        self.dirty = True

    @property
    def restored_names(self) -> list[str]:
        """The names saved state was put back into at this cell's end (``restored``: "model (...), opt (...)")."""
        return re.findall(r"(?:^|\), )([A-Za-z_]\w*) \(", self.restored)

    def feed_log(self, worker: int, text: str) -> None:
        self.workers[worker].log_tail.feed([text])
        if not self.restored and session_wire.RESTORED in text:  # said in the cell's view, not in its log alone
            line = text[text.index(session_wire.RESTORED) + len(session_wire.RESTORED):].split("\n", 1)[0]
            self.restored = line.split(" (saved in ", 1)[0]
        self.dirty = True

    def worker_ended(self, worker: int, end: WorkerEnd) -> None:
        """A worker's end on its card. A Stop ends every worker at the same step, a few ms apart: their cards
        change together (held until the last one stopped, or the cell concluded), never one stopped and one
        running."""
        if end.status == CellEnd.INTERRUPTED:
            self._held_stops[worker] = end
            if len(self.record.ends) < len(self.workers):
                return
        self._show_held_stops()
        if end.status != CellEnd.INTERRUPTED:
            self.workers[worker].apply_status(end.status.worker_status, end.error)
        self.dirty = True

    def _show_held_stops(self) -> None:
        held, self._held_stops = self._held_stops, {}
        for index, end in held.items():
            self.workers[index].apply_status(end.status.worker_status, end.error)

    def conclude(self) -> None:
        """The core concluded the cell (its record holds how): the workers still running show its end."""
        self.ended = time.time()
        if self._live is not None and self.results:  # a cell run without --block: its value under its view
            self._live.add_value(WorkersValue(self.results))
        self._show_held_stops()
        status = {CellState.FINISHED: WorkerStatus.FINISHED, CellState.FAILED: WorkerStatus.FAILED}.get(
            self.record.state, WorkerStatus.STOPPED)
        for worker in self.workers:
            if worker.status in (WorkerStatus.STARTING, WorkerStatus.RUNNING, WorkerStatus.WAITING):
                worker.status = status
        self.dirty = True

    def end(self) -> None:
        """Called without the session's lock once concluded: wake waiters, or leave the final summary. A cell that
        ended with the processes' restart shows the new ones once they are up (their pids and restart count, on
        its cards and in its summary; issue 43), not the processes that are gone."""
        restarting = self.session.state.status == ClusterStatus.RESTARTING
        old = {w.pid for w in self.session.state.workers}
        self._done.set()
        if not self._waits.any:
            self.finish_views()
        if restarting:
            threading.Thread(target=self._show_new_processes, args=(old,), daemon=True,
                             name=f"nbworkers-{self.name}-new-processes").start()

    def _show_new_processes(self, old: set[Any]) -> None:
        deadline = time.monotonic() + self.session.settings.session_restart_wait
        while time.monotonic() < deadline:
            pids = [w.pid for w in self.session.state.workers]
            if all(pids) and not old & set(pids):
                if self._finished_with is not None:
                    self.finish_views(*self._finished_with)
                return
            time.sleep(NEW_PROCESSES_POLL)

    # ------------------------------------------------------------------------------ views
    def refresh_if_due(self, interval: float) -> None:
        """The supervisor's refresh of a running cell's views: when something changed, at most every ``interval``
        seconds, and not while a ``wait()`` refreshes them itself (from the notebook's thread)."""
        if self.dirty and not self._waits.any and time.monotonic() - self._flushed >= interval:
            self._flushed = time.monotonic()
            self.refresh_views()

    def refresh_views(self) -> None:
        with self._views_lock:
            views = list(self._views)
            if not views:
                return
            snapshot = self.snapshot()
            self.dirty = False
            for view in views:
                try:
                    view.update(snapshot)
                except Exception:
                    traceback.print_exc(file=sys.__stderr__)

    def finish_views(self, error_below: bool = False, echoed: bool = False) -> None:
        """The views' final summary; ``error_below``: a ``RunFailed`` with the traceback is raised under it (the
        summary leaves the traceback to it); ``echoed``: the workers' output is in the cell already."""
        from nbworkers.magics.run.outputs import final_snapshot

        with self._views_lock:
            self._finished_with = (error_below, echoed)
            snapshot = final_snapshot(self.snapshot(), error_below, echoed)
            for view in self._views:
                try:
                    view.finish(snapshot)
                except Exception:
                    traceback.print_exc(file=sys.__stderr__)


class LogRouter:
    """Gives each piece of a worker's output to the cell that printed it: the worker prints a marker line before
    and after each cell (``session_wire.marker``); output outside any cell stays in the session's own log."""

    HEAD = "--- nbworkers: cell "

    def __init__(self) -> None:
        self._cell: dict[int, int | None] = {}  # worker -> the cell whose output its log is carrying
        self._carry: dict[int, str] = {}  # worker -> an unfinished last line that may be a marker's start

    def route(self, cells: list[SessionCell], index: int, text: str) -> list[int]:
        """Feed ``text`` (worker ``index``'s output) to its cells; the cells whose end marker it carried."""
        text = self._carry.pop(index, "") + text
        tail = text[text.rfind("\n") + 1:]
        if tail and (tail.startswith(self.HEAD) or self.HEAD.startswith(tail)):  # a marker split in two
            self._carry[index], text = tail, text[: len(text) - len(tail)]
        at = 0
        closed = []
        target = self._cell.get(index)
        for match in session_wire.MARKER.finditer(text):
            _feed(cells, target, index, text[at:match.start()])
            number, event = int(match.group(1)), match.group(2)
            if event == "start":
                target = number
            else:
                closed.append(number)
                target = None
            at = match.end()
        _feed(cells, target, index, text[at:])
        self._cell[index] = target
        return closed


def _feed(cells: list[SessionCell], number: int | None, index: int, text: str) -> None:
    if text and number is not None and 0 < number <= len(cells):
        cells[number - 1].feed_log(index, text)
