"""A session's part in its run loop (``magics/run/loop.py``'s ``Participant``): its command and data sockets, its
cells and their pure core (``core/cells.py``).

The loop hands it the relay messages of the current generation (a cell's start, pause, save and end; rich output;
each worker's log lines routed to the cell that printed them; a running cell's metrics and statuses), its tick
each round, and the supervisor's decisions (``core/bridge.py`` makes them the session core's events). It carries
out the session core's actions (send a command, tell a cell's views) and posts what needs the processes to the
loop (``bridge.run_event``: a restart that loses state). It adds the session's part to the run's one snapshot.
Its hooks marked "lock held" run under the loop's lock.
"""

from __future__ import annotations

import time
from typing import Any, assert_never

from nbworkers.magics.run.core import events as run_ev
from nbworkers.magics.run.loop import RunLoop
from nbworkers.magics.run.noise import NoiseFilter
from nbworkers.magics.run.relay import Message
from nbworkers.magics.sessions.cell import LogRouter, SessionCell
from nbworkers.magics.sessions.channel import CommandChannel
from nbworkers.magics.sessions.core import SessionCore, SessionTimings, bridge
from nbworkers.magics.sessions.core import events as ev
from nbworkers.magics.sessions.core.events import Group, WorkerEnd, WorkerSave
from nbworkers.magics.sessions.core.records import RESTORE_LABEL
from nbworkers.magics.sessions.data import DataChannel
from nbworkers.magics.sessions.pull import PullRequest
from nbworkers.magics.sessions.summary import session_summary, with_session
from nbworkers.magics.shapes import ClusterSnapshot
from nbworkers.protocol import mime, session_wire
from nbworkers.protocol.statuses import CellEnd, CellState, WorkerStatus


class SessionParticipant:
    def __init__(self, session: Any):
        self.session = session  # the user's handle (session.py's Session): what its cells show and ask
        self.channel: CommandChannel | None = None  # bound at the first launch, where the relay is
        self.data: DataChannel | None = None

    # ------------------------------------------------------------------------------ the loop's hooks
    def begin_run(self, loop: RunLoop) -> None:
        self.loop = loop
        self.settings = loop.settings
        self.channel, self.data = None, None
        self.cells: list[SessionCell] = []
        self.core = SessionCore(loop.name, len(loop.state.workers), self._timings, clock=time.monotonic)
        self._to_end: list[SessionCell] = []  # concluded under the lock, ended (views, waiters) outside it
        self.pulls: dict[str, PullRequest] = {}  # request id -> its pending pull
        self._logs = LogRouter()  # each worker's output to the cell that printed it
        self._noise = self._noise_filters()  # TensorFlow's chatter stays out of the cells (the log keeps it)
        self._ended = False

    def _timings(self) -> SessionTimings:
        """The grace periods as the settings say now (a user may change them while the session runs)."""
        return SessionTimings.from_settings(self.settings)

    def before_launch(self) -> dict[str, str]:
        if self.channel is None:  # bound where the relay is, encrypted as it is (--backend ray: CurveZMQ)
            hosts, curve = self.loop.backend.relay_hosts(), self.loop.relay.curve
            self.channel = CommandChannel(self.loop.key, *hosts, curve=curve)
            self.data = DataChannel(*hosts, curve=curve)
        self.channel.new_generation(self.loop.state.generation)
        self.loop.post(run_ev.HoldRestarts(self._timings().save_wait))  # a restart the run decides waits for a save
        self._logs = LogRouter()
        self._noise = self._noise_filters()
        return {session_wire.ENV_SESSION: self.loop.name, session_wire.ENV_COMMANDS: self.channel.address}

    def on_message(self, message: Message) -> bool:
        content, kind = message.content, message.kind
        index = content["worker"]
        current = self.cells[self.core.current - 1] if self.core.current else None
        if kind == "cell":
            self._on_cell(index, content)
            return True
        if kind == "display":
            self._on_display(index, content)
            return True
        if kind == "log":
            self._route_log(index, "".join(self._noise[index].filter(content["lines"])))
        elif kind == "metrics" and current is not None:
            current.workers[index].apply_metrics(content, time.time())
            current.dirty = True
        elif kind == "status" and current is not None and content["state"] in (WorkerStatus.WAITING,
                                                                                WorkerStatus.RUNNING):
            current.workers[index].apply_status(WorkerStatus(content["state"]), content.get("detail") or "")
            current.dirty = True
        return False  # the run's too (its log, its workers' progress)

    def tick(self) -> None:
        if self.channel is None:
            return
        self.channel.drain()
        self.tell(ev.Tick(self.group()))

    def idle(self) -> bool:
        return self.core.current is None  # an idle session is not stalled

    def on_run_action(self, action: run_ev.Action) -> None:
        event = bridge.session_event(action, self.loop.state.error)
        if event is not None:
            self.tell(event)

    def after_round(self) -> None:
        self._end_cells()
        with self.loop.lock:
            current = self.cells[self.core.current - 1] if self.core.current else None
        if current is not None:
            current.refresh_if_due(self.settings.flush_interval)

    def snapshot_part(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        return with_session(snapshot, session_summary(self.loop.name, self.core, self._put_back()))

    def _put_back(self) -> set[str]:
        """The saved names the cells since the last restart got back (a rebuilding cell's end, ``%workers restore``):
        ``%workers`` stops advising a restore already done. ``*``: a finished restore cell put everything back."""
        since = [cell for cell in self.cells if cell.number >= self.core.alive_from]
        if any(cell.label == RESTORE_LABEL and cell.state == CellState.FINISHED for cell in since):
            return {name for name, _, _ in self.core.saved.rebuilt()} if self.core.saved is not None else set()
        return {name for cell in since for name in cell.restored_names}

    def drop_counts(self, counts: dict[str, int]) -> None:
        if self.data is not None:
            counts["data"] = self.data.dropped  # data messages refused (unsigned, oversized, not for a pull)

    def run_ended(self) -> None:
        with self.loop.lock:
            self._ended = True
            self.tell(ev.SessionEnded(self.loop.state.status, self.loop.state.error))
            for request in self.pulls.values():
                request.fail(f"session {self.loop.name!r} ended before worker {request.worker} replied")
        self._end_cells()
        self.launch_failed()

    def launch_failed(self) -> None:
        for channel in (self.channel, self.data):
            if channel is not None:
                channel.close()

    # ------------------------------------------------------------------------------ the session core
    def group(self) -> Group:
        """Where the processes are, for the session core (lock held)."""
        connected = self.channel is not None and self.channel.ready(len(self.loop.state.workers))
        return bridge.group(ending=self._ended or self.loop.ending, restart_pending=self.loop.core.restart_pending,
                            connected=connected)

    def submit(self, code: str, timeout: float | None, display: str, label: str = "",
               prompt: int | None = None) -> SessionCell:
        """A new cell, queued (lock held); an idle session starts it now, not at the loop's next round. ``label``:
        what the views call a cell nbworkers runs itself ("restore"); a user's is "cell N"."""
        number = len(self.cells) + 1
        actions = self.core.handle(ev.Submitted(number, timeout, self.group(), label, prompt))
        cell = SessionCell(self.session, self.core.record(number), code, display, label)
        self.cells.append(cell)
        self.loop.dirty = True
        self.carry_out(actions)
        return cell

    def tell(self, event: ev.Event) -> ev.InterruptOutcome | None:
        """Give the session core one event and carry out what it decides (lock held); the answer to a Stop."""
        return self.carry_out(self.core.handle(event))

    def carry_out(self, actions: list[ev.Action]) -> ev.InterruptOutcome | None:
        """Carry out the session core's actions, in order (lock held); the answer to a Stop, if one was asked."""
        answer = None
        for action in actions:
            request = bridge.run_event(action)
            if request is not None:
                self.loop.post(request)  # the supervisor's, after the event the loop is handling (if any)
                continue
            match action:
                case ev.Dispatch():
                    cell = self.cells[action.cell - 1]
                    cell.begin()
                    self._send("run", cell=action.cell, code=cell.code, display=cell.display,
                               display_max_bytes=self.settings.display_max_bytes, title=cell.label)
                case ev.SendPause():
                    self._send("pause", workers=list(action.workers), cell=action.cell)
                case ev.SendResume():
                    self._send("resume", workers=list(action.workers), cell=action.cell, stop_at=action.stop_at)
                case ev.SendInterrupt():
                    self._send("interrupt", workers=list(action.workers), cell=action.cell)
                case ev.SendAbort():
                    self._send("abort", workers=list(action.workers), cell=action.cell, reason=action.reason)
                case ev.SendSave():
                    self._send("save", workers=list(action.workers), cell=action.cell, holder=action.holder,
                               max_bytes=session_wire.SAVE_MAX_BYTES)
                case ev.CellWorkerEnded():
                    self.cells[action.cell - 1].worker_ended(action.worker, action.end)
                case ev.CellConcluded():
                    cell = self.cells[action.cell - 1]
                    cell.conclude()
                    self._to_end.append(cell)
                case ev.DropStale():
                    self.loop.relay.drops.note("stale", action.detail)
                case ev.FailPulls():
                    for pull in self.pulls.values():
                        pull.fail(action.reason)
                case ev.Answer():
                    answer = action.outcome
                    if self.core.current is not None:
                        self.cells[self.core.current - 1].dirty = True
                case ev.RestartLosingState() | ev.MarkProgress() | ev.SaveFinished():
                    pass  # the run's (bridge.run_event, above)
                case _:
                    assert_never(action)
        if actions:
            self.loop.dirty = True
        return answer

    def _send(self, kind: str, **fields: Any) -> None:
        assert self.channel is not None, f"session {self.loop.name!r} was not started"
        self.channel.send(kind, **fields)

    # ------------------------------------------------------------------------------ the workers' messages
    def _on_cell(self, index: int, content: dict[str, Any]) -> None:
        """A worker's ``cell`` message (``protocol/session_wire.py`` checked its fields) to the core."""
        if content["event"] == "start":
            self.tell(ev.Began(index, content["cell"]))
        elif content["event"] == "paused":
            self.tell(ev.Paused(index, content["cell"], content["step"]))
        elif content["event"] == "pausing":
            self.tell(ev.Pausing(index, content["cell"]))
        elif content["event"] == "saved":
            self.tell(ev.StateSaved(index, WorkerSave(
                tuple((e["name"], e["kind"], e["detail"]) for e in content.get("saved", [])),
                tuple((e["name"], e["why"]) for e in content.get("skipped", [])),
                content.get("dir") or "", content.get("error") or "",
                tuple((e["name"], e["cell"]) for e in content.get("saved", []) if isinstance(e.get("cell"), int)))))
        elif content["event"] == "end":
            end = WorkerEnd(CellEnd(content["status"]), content.get("error") or "", content.get("traceback") or "",
                            bool(content.get("aborted")), content.get("t"), content.get("step"))
            self.tell(ev.WorkerEnded(index, content["cell"], end))

    def _on_display(self, index: int, content: dict[str, Any]) -> None:
        """A worker's rich output (``protocol/session_wire.py`` checked its shape) to its cell, within the limits."""
        number, drops = content["cell"], self.loop.relay.drops
        if number != self.core.current:  # a cell's outputs come while it runs, before its worker's end
            drops.note("stale", f"display for cell {number}, not the running one, from worker {index}")
            return
        try:
            mime.check_bundle(content["data"], content.get("metadata"), self.settings.display_max_bytes)
        except mime.BundleError as error:
            drops.note("oversized", f"display from worker {index}: {error}")
            return
        cell = self.cells[number - 1]
        if not cell.add_rich(index, content["source"], content["data"], content.get("metadata") or {},
                             self.settings.display_max_outputs):
            drops.note("oversized", f"cell {number}: more than {self.settings.display_max_outputs} "
                       "outputs (setting display_max_outputs)")
        cell.dirty = True

    def _noise_filters(self) -> list[NoiseFilter]:
        """One filter per worker, apart from the run's (each keeps its own place in a line)."""
        return [NoiseFilter(self.loop.noise_level) for _ in self.loop.state.workers]

    def _route_log(self, index: int, text: str) -> None:
        for number in self._logs.route(self.cells, index, text):
            self.tell(ev.LogClosed(index, number))

    def _end_cells(self) -> None:
        with self.loop.lock:
            cells, self._to_end = self._to_end, []
        for cell in cells:
            cell.end()
