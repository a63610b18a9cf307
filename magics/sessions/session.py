"""An interactive session (``%%worker -n 2 --session NAME``): a cluster whose workers stay alive and run cell
after cell in their own persistent namespaces (``distlib/worker/session.py``).

``Session`` is a ``Cluster`` (same launch, relay, restart policy, watchdog, stop) with a command socket
(``session_channel``) and a queue of ``SessionCell``s. The supervisor thread runs one cell at a time: it
sends the cell to every worker once all are ready, gives each worker's output (split by marker lines),
metrics and status to the cell, and concludes the cell when every worker has ended it. Cells submitted
while one runs wait in a queue (as IPython's execution queue); a failed cell cancels the queued ones.

- One worker's error: the others get ``session_peer_grace`` seconds to end the cell too (an error in code
  every worker runs ends everywhere); then their collectives are aborted (``abort``). A worker whose
  collectives were aborted cannot use them again, so the session restarts its processes and says which
  cells' state is gone. No end within ``session_abort_grace`` after the abort: the same restart.
- Stop (``interrupt``): KeyboardInterrupt in the cell on every worker; the session stays usable. A cell
  still running ``session_interrupt_grace`` seconds later (stuck in a collective), or a second Stop,
  restarts the processes (state gone).
- A worker killed: the group restarts as any cluster does (restart policy), and the cells' state is gone.
- ``pull(expression, worker)`` (``session_pull``): the value of an expression in a worker's namespace, as JSON and
  ``.npy`` only (``session_pull``); it runs after the cells submitted before it.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from nbworkers.magics.run.cluster import Cluster
from nbworkers.magics.run.core.events import Progress, RestartRequested
from nbworkers.magics.run.core.failures import UserRestart, WorkerFailure
from nbworkers.magics.run.relay import Message
from nbworkers.magics.sessions.cell import LogRouter, SessionCell
from nbworkers.magics.sessions.channel import CommandChannel
from nbworkers.magics.shapes import ClusterSnapshot
from nbworkers.protocol import session_wire


class SessionEnded(RuntimeError):
    """The session is stopped (or failed): start it again with ``%%worker -n N --session NAME``."""


class Session(Cluster):
    def _new_run(self) -> None:  # Cluster.__init__, and restart() of a session that ended
        super()._new_run()
        self._channel: CommandChannel | None = None
        self.cells: list[SessionCell] = []
        self._queue: deque[SessionCell] = deque()
        self._current: SessionCell | None = None
        self._to_end: list[SessionCell] = []  # concluded under the lock, ended (views, waiters) outside it
        self._pulls: dict = {}  # request id -> session_pull.PullRequest
        self._alive_from = 1  # the first cell whose state lives in the current processes
        self._logs = LogRouter()  # each worker's output to the cell that printed it
        self.lost_note = ""  # what the last restart of the processes lost
        self._cell_outcome: tuple | None = None  # how a restart on purpose ends the running cell

    @property
    def channel(self) -> CommandChannel:
        """The session's command socket (bound at its first launch)."""
        assert self._channel is not None, f"session {self.name!r} was not started"
        return self._channel

    # ------------------------------------------------------------------------------ user-facing
    def submit(self, code: str, timeout: float | None = None) -> SessionCell:
        """Queue a cell; it runs once the cells before it have ended (returns at once)."""
        with self._lock:
            if self._done.is_set() or self._core.stopping:
                raise SessionEnded(f"session {self.name!r} is {self.status}: `%%worker -n N --session {self.name}` "
                                   "starts it again (its variables are gone)")
            cell = SessionCell(self, len(self.cells) + 1, code, timeout)
            self.cells.append(cell)
            self._queue.append(cell)
            self._dirty = True
            self._dispatch_next()  # an idle session starts it now, not at the supervisor's next round
        return cell

    @property
    def restarts(self) -> int:
        """How many times the session's processes were started again (each time their state was lost)."""
        return self.state.restarts

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._current is not None or bool(self._queue)

    def interrupt(self, cell: SessionCell | None = None) -> str:
        """Stop the running cell (KeyboardInterrupt on every worker); a queued ``cell`` is cancelled instead.
        A second Stop of the same cell restarts the processes. Returns what was done."""
        with self._lock:
            current = self._current
            if cell is not None and cell is not current:
                if cell in self._queue:
                    self._queue.remove(cell)
                    self._conclude_cell(cell, "cancelled", "cancelled before it ran (Stop)")
                    return "cancelled"
                return "not running"
            if current is None:
                return "idle"
            current.interrupts += 1
            if current.interrupts >= 2:
                self._restart_processes("Stop was pressed twice", cell_state="stopped")
                return "restarting"
            current.interrupted_at = time.monotonic()
            pending = [w for w in range(len(self.state.workers)) if w not in current.ends]
            self.channel.send("pause", workers=pending, cell=current.number)  # then resume(stop_at): _check_cell
            current.dirty = True
            return "interrupting"

    def stop_cell(self) -> str:
        return self.interrupt()

    def pull(self, expression: str, worker: int = 0, timeout: float | None = None) -> Any:
        """The value of ``expression`` in ``worker``'s namespace, after the cells submitted before this call:
        numbers, strings, None, lists, dicts, numpy arrays (tensors come back as arrays), a History's dict.
        Raises ``PullError`` when the expression raises, the value cannot travel, or the reply is refused."""
        from nbworkers.magics.sessions.pull import pull

        return pull(self, expression, worker, timeout)

    def wait(self, timeout: float | None = None, raise_on_failure: bool = True, echo: Any = None,
             **kwargs: Any) -> bool:
        """Wait for the last submitted cell (``RunFailed`` if it failed); once stopping, for the session's end."""
        with self._lock:
            last = self.cells[-1] if self.cells else None
            ending = self._done.is_set() or self._stop_event.is_set() or self._core.stopping
        if ending or last is None:
            return super().wait(timeout, echo=echo, **kwargs)
        return last.wait(timeout, raise_on_failure=raise_on_failure, echo=echo)

    def snapshot(self) -> ClusterSnapshot:
        with self._lock:
            data = self.state.snapshot()
            data["session"] = self._summary()
        return data

    def _summary(self) -> dict[str, Any]:
        current = self._current
        return {
            "name": self.name, "cells": len(self.cells), "state": "busy" if current or self._queue else "idle",
            "cell": current.number if current else None, "queued": len(self._queue),
            "alive_from": self._alive_from, "lost": self.lost_note,
        }

    def __repr__(self) -> str:
        summary = self._summary()
        return (f"<Session {self.name!r}: {len(self.state.workers)} workers, {self.status}, {summary['cells']} cells, "
                f"{summary['state']}>")

    # ------------------------------------------------------------------------------ launch hooks
    def start(self) -> "Session":
        try:
            super().start()
        except BaseException:
            if self._channel is not None:
                self._channel.close()
            raise
        return self

    def _extra_env(self) -> dict[str, str]:
        return {session_wire.ENV_SESSION: self.name, session_wire.ENV_COMMANDS: self.channel.address}

    def _launch_group(self) -> None:
        if self._channel is None:  # bound where the relay is, encrypted as it is (--backend ray: CurveZMQ)
            curve = getattr(self._relay, "curve", None)
            self._channel = CommandChannel(self._key, *self.backend.relay_hosts(), curve=curve)
        self._channel.new_generation(self.state.generation)
        self._logs = LogRouter()
        super()._launch_group()

    # ------------------------------------------------------------------------------ supervisor hooks
    def _supervise(self) -> None:
        try:
            super()._supervise()
        finally:
            with self._lock:
                error = f": {self.state.error}" if self.state.error else ""
                reason = f"the session ended ({self.state.status}){error}"
                if self._current is not None:
                    self._conclude_cell(self._current, "failed" if self.state.status == "failed" else "stopped", reason)
                self._cancel_queue(reason)
                for request in self._pulls.values():
                    request.fail(f"session {self.name!r} ended before worker {request.worker} replied")
            self._end_cells()
            if self._channel is not None:
                self._channel.close()

    def _periodic(self) -> None:
        self._end_cells()
        super()._periodic()
        current = self._current
        if (current is not None and current.dirty
                and time.monotonic() - getattr(current, "_flushed", 0.0) >= self.settings.flush_interval):
            with self._lock:
                waiting = current._waiters > 0
            if not waiting:
                current._flushed = time.monotonic()
                current.refresh_views()

    def _idle(self) -> bool:
        return self._current is None  # an idle session is not stalled

    def _check_requests(self) -> None:
        super()._check_requests()
        if self._channel is None:
            return
        self._channel.drain()
        now = time.monotonic()
        if self._current is not None:
            self._check_cell(self._current, now)
        self._dispatch_next()

    def _dispatch_next(self) -> None:
        """Send the next queued cell to every worker once the session is idle and all workers are ready."""
        if (self._current is None and self._queue and not self._core.restart_pending and not self._core.stopping
                and self.channel.ready(len(self.state.workers))):
            cell = self._queue.popleft()
            self._current = cell
            cell.begin()
            self._handle(Progress())
            self._dirty = True
            self.channel.send("run", cell=cell.number, code=cell.code)

    def _check_cell(self, cell: SessionCell, now: float) -> None:
        workers = range(len(self.state.workers))
        running = [w for w in workers if w not in cell.ends]
        if not running:
            if all(w in cell.closed_logs for w in workers) or now - cell.all_ended_at >= 1.0:
                self._finish_cell(cell)
            return
        if cell.timeout and cell.started and time.time() - cell.started > cell.timeout and cell.interrupted_at is None:
            cell.error = f"timed out after {cell.timeout:g} s (--timeout)"
            cell.timed_out = True
            self.interrupt(cell)
        if cell.interrupted_at is not None and not cell.resumed:
            self._stop_at_common_step(cell, running, now)
        if (cell.first_error_at is not None and cell.aborted_at is None
                and now - cell.first_error_at >= self.settings.session_peer_grace):
            cell.aborted_at = now
            reason = f"worker {cell.first_error_worker} of session {self.name!r} failed in cell {cell.number}"
            self.channel.send("abort", workers=running, cell=cell.number, reason=reason)
        elif cell.aborted_at is not None and now - cell.aborted_at >= self.settings.session_abort_grace:
            self._restart_processes(f"{_workers(running)} did not end cell {cell.number} after an abort",
                                    cell_state="failed", error=self._error_text(cell))
        elif cell.interrupted_at is not None and now - cell.interrupted_at >= self.settings.session_interrupt_grace:
            self._restart_processes(f"{_workers(running)} did not end cell {cell.number} "
                                    f"{self.settings.session_interrupt_grace:g} s after Stop (stuck in a collective)",
                                    cell_state="stopped")

    def _stop_at_common_step(self, cell: SessionCell, running: list[int], now: float) -> None:
        """Stop: every worker raises KeyboardInterrupt at the same step. Workers at a report point pause and
        say their step; one that did not pause within session_pause_wait is inside the next step's collective,
        waiting for the paused ones: all stop one step later. No worker paused (the cell does not report):
        plain KeyboardInterrupt everywhere."""
        paused = {w: step for w, step in cell.paused.items() if w in running}
        waited = cell.interrupted_at is not None and now - cell.interrupted_at >= self.settings.session_pause_wait
        if paused and (len(paused) == len(running) or waited):
            stop_at = max(paused.values()) + (0 if len(paused) == len(running) else 1)
            self.channel.send("resume", workers=running, cell=cell.number, stop_at=stop_at)
            cell.resumed = True
        elif waited:
            self.channel.send("interrupt", workers=running, cell=cell.number)
            cell.resumed = True

    def _finish_cell(self, cell: SessionCell) -> None:
        statuses = {w: end["status"] for w, end in cell.ends.items()}
        aborted = [w for w, end in cell.ends.items() if end.get("aborted")]
        if "error" in statuses.values():
            error = self._error_text(cell)
            failed = tuple(sorted(w for w, s in statuses.items() if s == "error"))
            if aborted:
                self._restart_processes(f"worker {cell.first_error_worker} failed while {_workers(aborted)} "
                                        "waited in a collective, which had to be aborted", cell_state="failed",
                                        error=error, failed=failed)
                return
            self._conclude_cell(cell, "failed", error, failed)
        elif "interrupted" in statuses.values():
            self._conclude_cell(cell, "failed" if cell.timed_out else "stopped",
                                cell.error or "interrupted (KeyboardInterrupt) by Stop")
            if aborted:
                self._restart_processes("collectives were aborted while stopping the cell", cell_state="stopped")
        else:
            self._conclude_cell(cell, "finished")

    def _error_text(self, cell: SessionCell) -> str:
        worker = cell.first_error_worker
        end = cell.ends.get(worker) if worker is not None else None
        if end is None:
            return cell.error or "failed"
        text = f"worker {worker}: {end.get('error') or 'error'}"
        if end.get("traceback"):
            text += "\n" + end["traceback"].rstrip()
        others = [w for w, e in cell.ends.items() if w != worker and e["status"] != "ok"]
        if others:
            text += f"\n({_workers(others)} {'was' if len(others) == 1 else 'were'} interrupted because of it)"
        return text

    def _conclude_cell(self, cell: SessionCell, state: str, error: str = "", failed: tuple[int, ...] = ()) -> None:
        if cell.state not in ("queued", "running"):
            return
        cell.conclude(state, error, failed)
        if cell is self._current:
            self._current = None
        if state in ("failed",) and self._queue:
            self._cancel_queue(f"not run: cell {cell.number} failed")
        self._to_end.append(cell)
        self._dirty = True

    def _cancel_queue(self, reason: str) -> None:
        while self._queue:
            self._conclude_cell(self._queue.popleft(), "cancelled", reason)

    def _end_cells(self) -> None:
        with self._lock:
            cells, self._to_end = self._to_end, []
        for cell in cells:
            cell.end()

    def _restart_processes(self, reason: str, cell_state: str = "failed", error: str = "",
                           failed: tuple[int, ...] = ()) -> None:
        """Restart the group on purpose (collectives unusable, a stuck cell): the processes' state is lost."""
        if self._core.restart_pending or self._core.stopping:
            return
        self._cell_outcome = (cell_state, error, failed)
        self._handle(RestartRequested(UserRestart(reason)))

    def _restart_scheduled(self, cause: WorkerFailure) -> None:
        ran = [c.number for c in self.cells if c.number >= self._alive_from and c.started is not None]
        lost = f"cells {ran[0]}-{ran[-1]}" if len(ran) > 1 else f"cell {ran[0]}" if ran else "no cell"
        self.lost_note = (f"the session's processes restart ({cause}): the state of {lost} is gone (variables, models, "
                          "datasets); run the cells that build what you need again")
        default = ("stopped" if isinstance(cause, UserRestart) else "failed", "", ())  # the Restart button: stopped
        state, error, failed = self._cell_outcome or default
        self._cell_outcome = None
        if self._current is not None:
            self._conclude_cell(self._current, state, f"{error}\n{self.lost_note}".strip(), failed)
        self._cancel_queue(f"not run: {self.lost_note}")
        self._alive_from = len(self.cells) + 1
        for request in self._pulls.values():
            request.fail(f"not answered: {self.lost_note}")

    def _run_failed(self, failure: WorkerFailure) -> None:
        if self._current is not None:
            self._conclude_cell(self._current, "failed", f"the session failed: {self.state.error}")
        self._cancel_queue(f"not run: the session failed: {self.state.error}")

    def _apply(self, message: Message) -> None:
        content, kind = message.content, message.kind
        if content["gen"] != self.state.generation or content["worker"] >= len(self.state.workers):
            return super()._apply(message)  # counted as stale / malformed there
        index = content["worker"]
        current = self._current
        if kind == "log":
            self._route_log(index, "".join(content["lines"]))
        elif kind == "cell":
            self._on_cell(index, content)
            return
        elif kind == "pull":
            request = self._pulls.get(content["request"])
            if request is None or request.worker != index or request.gen != content["gen"]:
                self.relay.drops.note("stale", f"pull reply for no pending request from worker {index}")
            else:
                request.feed(content)
            return
        elif kind == "metrics" and current is not None:
            current.workers[index].apply_metrics(content)
            current.dirty = True
        elif kind == "status" and current is not None and content["state"] in ("waiting", "running"):
            current.workers[index].apply_status(content["state"], content.get("detail") or "")
            current.dirty = True
        super()._apply(message)

    def _on_cell(self, index: int, content: dict[str, Any]) -> None:
        cell = self._current
        if cell is None or content["cell"] != cell.number:
            self.relay.drops.note("stale", f"cell {content['cell']} message from worker {index}")
            return
        if content["event"] == "paused":
            cell.paused[index] = content["step"]
        elif content["event"] == "end" and index not in cell.ends:
            if content["status"] == "error" and cell.first_error_worker is None:
                cell.first_error_worker = index
            cell.worker_ended(index, content)
            if len(cell.ends) == len(self.state.workers):
                cell.all_ended_at = time.monotonic()
        self._handle(Progress(index))
        self._dirty = True

    def _route_log(self, index: int, text: str) -> None:
        self._logs.route(self.cells, index, text)


def _workers(items) -> str:
    items = list(items)
    return ("worker " if len(items) == 1 else "workers ") + ", ".join(str(i) for i in items)
