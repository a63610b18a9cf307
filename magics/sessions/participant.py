"""A session's part in its run loop (``magics/run/loop.py``'s ``Participant``): its command and data sockets, its
cells and their pure core (``core/cells.py``).

It knows its run through a port (``magics/run/port.py``: the run's facts and how it is now; post, changed,
dropped), never the loop. The loop hands it the relay messages of the current generation as events, read once
(``magics/run/messages.py``: a cell's start, pause, save and end; rich output; each worker's output, routed here to
the cell that printed it; a running cell's metrics and statuses), its tick each round, and the supervisor's decisions
(``core/bridge.py`` makes them the session core's events). Every event for the session core goes through the loop's
one queue (``post``, then ``take``), as the supervisor's do, so no chain of events runs inside another's actions. It
carries out the session core's actions (send a command, tell a cell's views) and posts what needs the processes to
the loop (``bridge.run_event``: a restart that loses state). It adds the session's part to the run's one snapshot.
Its hooks marked "lock held" run under the loop's lock.
"""

from __future__ import annotations

import time
from typing import Any, assert_never, get_args

from nbworkers.magics.run import messages as relay_ev
from nbworkers.magics.run.core import events as run_ev
from nbworkers.magics.run.port import RunPort
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
from nbworkers.protocol.relay_curve import CurveServer
from nbworkers.protocol.statuses import CellState, WorkerStatus

SESSION_EVENTS = get_args(ev.Event)


class SessionParticipant:
    def __init__(self, session: Any):
        self.session = session  # the user's handle (session.py's Session): what its cells show and ask
        self.channel: CommandChannel | None = None  # bound at the first launch, where the relay is
        self.data: DataChannel | None = None

    # ------------------------------------------------------------------------------ the loop's hooks
    def begin_run(self, port: RunPort) -> None:
        self.port = port
        facts = port.facts
        self.name, self.key, self.settings, self.lock = facts.name, facts.key, facts.settings, facts.lock
        self.channel, self.data = None, None
        self.cells: list[SessionCell] = []
        self.core = SessionCore(self.name, port.now().workers, self._timings, clock=time.monotonic)
        self._to_end: list[SessionCell] = []  # concluded under the lock, ended (views, waiters) outside it
        self.pulls: dict[str, PullRequest] = {}  # request id -> its pending pull
        self._logs = LogRouter()  # each worker's output to the cell that printed it
        self._submitted: dict[int, tuple[str, str, str]] = {}  # a cell's code, display, label until its core takes it
        self._answer: ev.InterruptOutcome | None = None  # the session core's answer to the last Stop
        self._ended = False

    def _timings(self) -> SessionTimings:
        """The grace periods as the settings say now (a user may change them while the session runs)."""
        return SessionTimings.from_settings(self.settings)

    def before_launch(self, hosts: tuple[str, str | None], curve: CurveServer | None) -> dict[str, str]:
        if self.channel is None:  # bound where the relay is, encrypted as it is (--backend ray: CurveZMQ)
            self.channel = CommandChannel(self.key, *hosts, curve=curve)
            self.data = DataChannel(*hosts, curve=curve)
        self.channel.new_generation(self.port.now().generation)
        self.port.post(run_ev.HoldRestarts(self._timings().save_wait))  # a restart the run decides waits for a save
        self._logs = LogRouter()
        return {session_wire.ENV_SESSION: self.name, session_wire.ENV_COMMANDS: self.channel.address}

    def relayed(self, event: run_ev.Event | relay_ev.Relayed) -> None:
        current = self.cells[self.core.current - 1] if self.core.current else None
        match event:
            case relay_ev.WorkerOutput():  # TensorFlow's chatter already out (the log keeps it)
                self._route_log(event.worker, event.text)
            case relay_ev.CellStarted():
                self.post(ev.Began(event.worker, event.cell))
            case relay_ev.CellPaused():
                self.post(ev.Paused(event.worker, event.cell, event.step))
            case relay_ev.CellPausing():
                self.post(ev.Pausing(event.worker, event.cell))
            case relay_ev.CellSaved():
                self.post(ev.StateSaved(event.worker, WorkerSave(event.saved, event.skipped, event.folder, event.error,
                                                                  event.built_in)))
            case relay_ev.CellEnded():
                end = WorkerEnd(event.status, event.error, event.traceback, event.aborted, event.t, event.step)
                self.post(ev.WorkerEnded(event.worker, event.cell, end))
            case relay_ev.Displayed():
                self._on_display(event)
            case run_ev.Metrics() if current is not None:
                current.workers[event.worker].apply_metrics(event.content, time.time())
                current.dirty = True
            case run_ev.StatusReported() if current is not None and event.state in (WorkerStatus.WAITING,
                                                                                    WorkerStatus.RUNNING):
                current.workers[event.worker].apply_status(WorkerStatus(event.state), event.detail)
                current.dirty = True

    def tick(self) -> None:
        if self.channel is None:
            return
        self.channel.drain()
        self.post(ev.Tick(self.group()))

    def idle(self) -> bool:
        return self.core.current is None  # an idle session is not stalled

    def on_run_action(self, action: run_ev.Action) -> None:
        event = bridge.session_event(action, self.port.now().error)
        if event is not None:
            self.post(event)  # after the rest of the run's actions (one queue)

    def take(self, event: object) -> None:
        """The session core's event, in the loop's queue order (lock held): what it decides is carried out."""
        assert isinstance(event, SESSION_EVENTS), event
        actions = self.core.handle(event)
        if isinstance(event, ev.Submitted):  # its cell exists before what the core decided for it is carried out
            code, display, label = self._submitted.pop(event.cell)
            self.cells.append(SessionCell(self.session, self.core.record(event.cell), code, display, label))
            self.port.changed()
        self.carry_out(actions)

    def after_round(self) -> None:
        self._end_cells()
        with self.lock:
            current = self.cells[self.core.current - 1] if self.core.current else None
        if current is not None:
            current.refresh_if_due(self.settings.flush_interval)

    def snapshot_part(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        return with_session(snapshot, session_summary(self.name, self.core, self._put_back()))

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
        with self.lock:
            self._ended = True
            now = self.port.now()
            self.post(ev.SessionEnded(now.status, now.error))
            for request in self.pulls.values():
                request.fail(f"session {self.name!r} ended before worker {request.worker} replied")
        self._end_cells()
        self.launch_failed()

    def launch_failed(self) -> None:
        for channel in (self.channel, self.data):
            if channel is not None:
                channel.close()

    # ------------------------------------------------------------------------------ the session core
    def group(self) -> Group:
        """Where the processes are, for the session core (lock held)."""
        now = self.port.now()
        connected = self.channel is not None and self.channel.ready(now.workers)
        return bridge.group(ending=self._ended or now.ending, restart_pending=now.restart_pending, connected=connected)

    def post(self, event: ev.Event) -> None:
        """An event for the session core, through the loop's queue (lock held): handled now, unless the loop is
        handling one (then after it)."""
        self.port.post(event)

    def submit(self, code: str, timeout: float | None, display: str, label: str = "",
               prompt: int | None = None) -> SessionCell:
        """A new cell, queued (lock held, not from the loop's own handlers); an idle session starts it now, not at the
        loop's next round. ``label``: what the views call a cell nbworkers runs itself ("restore"); a user's is
        "cell N"."""
        number = len(self.cells) + len(self._submitted) + 1
        self._submitted[number] = (code, display, label)
        self.post(ev.Submitted(number, timeout, self.group(), label, prompt))
        assert len(self.cells) >= number, "a cell submitted from inside the loop's handlers"
        return self.cells[number - 1]

    def interrupt(self, cell: int | None) -> ev.InterruptOutcome:
        """A Stop (lock held, not from the loop's own handlers): of the running cell (None), or of a queued one
        (cancelled). The session core's answer."""
        self._answer = None
        self.post(ev.InterruptRequested(cell, self.group()))
        answer, self._answer = self._answer, None
        assert answer is not None, "a Stop asked from inside the loop's handlers"
        return answer

    def carry_out(self, actions: list[ev.Action]) -> None:
        """Carry out the session core's actions, in order (lock held); an answer to a Stop is kept for ``interrupt``."""
        for action in actions:
            request = bridge.run_event(action)
            if request is not None:
                self.port.post(request)  # the supervisor's, after the event the loop is handling (if any)
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
                    self.port.dropped("stale", action.detail)
                case ev.FailPulls():
                    for pull in self.pulls.values():
                        pull.fail(action.reason)
                case ev.Answer():
                    self._answer = action.outcome
                    if self.core.current is not None:
                        self.cells[self.core.current - 1].dirty = True
                case ev.RestartLosingState() | ev.MarkProgress() | ev.SaveFinished():
                    pass  # the run's (bridge.run_event, above)
                case _:
                    assert_never(action)
        if actions:
            self.port.changed()

    def _send(self, kind: str, **fields: Any) -> None:
        assert self.channel is not None, f"session {self.name!r} was not started"
        self.channel.send(kind, **fields)

    # ------------------------------------------------------------------------------ the workers' messages
    def _on_display(self, event: relay_ev.Displayed) -> None:
        """A worker's rich output (``protocol/session_wire.py`` checked its shape) to its cell, within the limits."""
        index, number = event.worker, event.cell
        if number != self.core.current:  # a cell's outputs come while it runs, before its worker's end
            self.port.dropped("stale", f"display for cell {number}, not the running one, from worker {index}")
            return
        try:
            mime.check_bundle(event.data, event.metadata, self.settings.display_max_bytes)
        except mime.BundleError as error:
            self.port.dropped("oversized", f"display from worker {index}: {error}")
            return
        cell = self.cells[number - 1]
        if not cell.add_rich(index, event.source, event.data, event.metadata, self.settings.display_max_outputs):
            self.port.dropped("oversized", f"cell {number}: more than {self.settings.display_max_outputs} "
                              "outputs (setting display_max_outputs)")
        cell.dirty = True

    def _route_log(self, index: int, text: str) -> None:
        for number in self._logs.route(self.cells, index, text):
            self.post(ev.LogClosed(index, number))

    def _end_cells(self) -> None:
        with self.lock:
            cells, self._to_end = self._to_end, []
        for cell in cells:
            cell.end()
