"""An interactive session (``%%worker -n 2 --session NAME``): a cluster whose workers stay alive and run cell
after cell in their own persistent namespaces (``distlib/worker/session.py``).

``Session`` is a ``Cluster`` (same launch, relay, restart policy, watchdog, stop) with a command socket
(``magics/sessions/channel.py``) and ``SessionCell``s. Every decision about cells is the session core's
(``magics/sessions/core/cells.py``: events in, actions out); this class is its shell: it turns relay messages, Stop
clicks and the supervisor's rounds into the core's events, and carries out its actions (send a command, tell a
cell's views, restart the processes through the supervisor core). Cells run one at a time, in order (as
IPython's execution queue); a failed cell cancels the queued ones.

- One worker's error: the others get ``session_peer_grace`` seconds to end the cell too (an error in code
  every worker runs ends everywhere); then their collectives are aborted (``abort``). A worker whose
  collectives were aborted cannot use them again, so the session restarts its processes and says which
  cells' state is gone. No end within ``session_abort_grace`` after the abort: the same restart.
- Stop (``interrupt``): KeyboardInterrupt in the cell on every worker; the session stays usable. A cell
  still running ``session_interrupt_grace`` seconds later (stuck in a collective), or a second Stop,
  restarts the processes (state gone).
- A worker killed: the group restarts as any cluster does (restart policy), and the cells' state is gone.
- Rich output: a worker's ``display`` message (a MIME bundle, ``protocol/mime.py``) goes to the running cell
  (``SessionCell.outputs``, its last expression to ``SessionCell.results``) when it passes the checks and limits
  (``display_max_bytes``, ``display_max_outputs``); else it is dropped and counted.
- ``pull(expression, worker)`` (``magics/sessions/pull.py``): the value of an expression in a worker's namespace,
  as JSON and ``.npy`` only, on the session's data socket (``data.py``); ``push(name=value)`` and
  ``scatter(name, array)`` (``push.py``) the other way, on the command socket. Both run after the cells submitted
  before them and move arrays as raw frames (``protocol/session_data.py``).
"""

from __future__ import annotations

import time
from typing import Any, assert_never

from nbworkers.magics.run.cluster import Cluster
from nbworkers.magics.run.core import events as run_ev
from nbworkers.magics.run.core.failures import UserRestart, WorkerFailure
from nbworkers.magics.run.core.statuses import CellEnd, WorkerStatus
from nbworkers.magics.run.noise import NoiseFilter
from nbworkers.magics.run.relay import Message
from nbworkers.magics.sessions.cell import LogRouter, SessionCell
from nbworkers.magics.sessions.channel import CommandChannel
from nbworkers.magics.sessions.core import SessionCore, SessionTimings
from nbworkers.magics.sessions.core import events as ev
from nbworkers.magics.sessions.core.events import Group, WorkerEnd, WorkerSave
from nbworkers.magics.sessions.data import DataChannel
from nbworkers.magics.sessions.pull import PullRequest
from nbworkers.magics.sessions.summary import session_summary, with_session
from nbworkers.magics.shapes import ClusterSnapshot
from nbworkers.protocol import mime, session_wire

RESTORE_CELL = ("__import__('nbworkers.distlib.saved_state.namespace', fromlist=['restore_session_state'])"
                ".restore_session_state()\nNone")  # the line's value is shown in the log, not as the cell's Out


class SessionEnded(RuntimeError):
    """The session is stopped (or failed): start it again with ``%%worker -n N --session NAME``."""


class Session(Cluster):
    def _new_run(self) -> None:  # Cluster.__init__, and restart() of a session that ended
        super()._new_run()
        self._channel: CommandChannel | None = None
        self._data: DataChannel | None = None
        self.cells: list[SessionCell] = []
        self._cells = SessionCore(self.name, len(self.state.workers), self._timings, clock=time.monotonic)
        self._to_end: list[SessionCell] = []  # concluded under the lock, ended (views, waiters) outside it
        self._pulls: dict[str, PullRequest] = {}  # request id -> its pending pull
        self._logs = LogRouter()  # each worker's output to the cell that printed it
        self._cell_noise = self._noise_filters()  # TensorFlow's chatter stays out of the cells (the log keeps it)

    def _timings(self) -> SessionTimings:
        """The grace periods as the settings say now (a user may change them while the session runs)."""
        return SessionTimings.from_settings(self.settings)

    @property
    def channel(self) -> CommandChannel:
        """The session's command socket (bound at its first launch)."""
        assert self._channel is not None, f"session {self.name!r} was not started"
        return self._channel

    @property
    def lost_note(self) -> str:
        """What the last restart of the processes lost."""
        return self._cells.lost_note

    # ------------------------------------------------------------------------------ user-facing
    def submit(self, code: str, timeout: float | None = None, display: str = "0") -> SessionCell:
        """Queue a cell; it runs once the cells before it have ended (returns at once). ``display``: whose rich
        output (``display(...)``, ``plt.show()``) the cell shows, worker 0's (``"0"``) or every worker's (``"all"``)."""
        with self._lock:
            if self._done.is_set() or self._core.stopping:
                raise SessionEnded(f"session {self.name!r} is {self.status}: `%%worker -n N --session {self.name}` "
                                   "starts it again (its variables are gone)")
            number = len(self.cells) + 1
            actions = self._cells.handle(ev.Submitted(number, timeout, self._group()))
            cell = SessionCell(self, self._cells.record(number), code, display)
            self.cells.append(cell)
            self._dirty = True
            self._carry_out(actions)  # an idle session starts it now, not at the supervisor's next round
        return cell

    def live_cells(self) -> str:
        """The cells whose state the current processes hold ("cells 1-8"): what a restart loses."""
        return self._cells.live_cells()

    @property
    def restarts(self) -> int:
        """How many times the session's processes were started again (each time their state was lost)."""
        return self.state.restarts

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._cells.busy

    def interrupt(self, cell: SessionCell | None = None) -> str:
        """Stop the running cell (KeyboardInterrupt on every worker); a queued ``cell`` is cancelled instead.
        A second Stop of the same cell restarts the processes. Returns what was done (``InterruptOutcome``)."""
        with self._lock:
            actions = self._cells.handle(ev.InterruptRequested(cell.number if cell else None, self._group()))
            answer = self._carry_out(actions)
        assert answer is not None
        return answer.value

    def stop_cell(self) -> str:
        return self.interrupt()

    def restore(self) -> SessionCell:
        """Queue a cell that puts back what the workers saved before the processes last restarted
        (``distlib/saved_state/namespace.py``: ``restore_session_state()`` on every worker): run the cells that
        build the saved models and variables first. ``SessionEnded`` once the session is stopped."""
        return self.submit(RESTORE_CELL)

    def pull(self, expression: str, worker: int = 0, timeout: float | None = None) -> Any:
        """The value of ``expression`` in ``worker``'s namespace, after the cells submitted before this call:
        numbers, strings, None, lists, dicts, numpy arrays (tensors come back as arrays), a History's dict.
        Raises ``PullError`` when the expression raises, the value cannot travel, or the reply is refused."""
        from nbworkers.magics.sessions.pull import pull

        return pull(self, expression, worker, timeout)

    def push(self, workers: list[int] | None = None, allow_pickle: bool = False, **values: Any) -> list[int]:
        """Assign each ``name=value`` in the namespaces of ``workers`` (default: every worker), after the cells
        submitted before this call: numbers, strings, None, lists, dicts, numpy arrays (as ``.npy``). Other
        objects only with ``allow_pickle=True`` (pickled here, unpickled in the workers). Returns the workers.
        Raises ``PushError`` (a ``PullError``) when a value cannot travel or a worker cannot be reached."""
        from nbworkers.magics.sessions.push import push

        return push(self, values, workers, allow_pickle)

    def scatter(self, name: str, array: Any, workers: list[int] | None = None) -> list[tuple[int, int]]:
        """Give each of ``workers`` (default: all) its shard of ``array`` along axis 0 as ``name`` (as
        ipyparallel's scatter: ``numpy.array_split``). Returns each worker's (start, stop) rows."""
        from nbworkers.magics.sessions.push import scatter

        return scatter(self, name, array, workers)

    def _drop_counts(self) -> dict[str, int]:
        counts = super()._drop_counts()
        if self._data is not None:
            counts["data"] = self._data.dropped  # data messages refused (unsigned, oversized, not for a pull)
        return counts

    @property
    def data_channel(self) -> DataChannel:
        """The socket pull replies arrive on (bound with the command socket)."""
        assert self._data is not None, f"session {self.name!r} was not started"
        return self._data

    def last_pending_cell(self) -> SessionCell | None:
        """The cell a call made now runs after (the last queued, else the running one); None: idle."""
        with self._lock:
            number = self._cells.last_pending
            return self.cells[number - 1] if number else None

    def wait(self, timeout: float | None = None, raise_on_failure: bool = True, echo: Any = None,
             **kwargs: Any) -> bool:
        """Wait for the last submitted cell (``RunFailed`` if it failed); once stopping, for the session's end."""
        with self._lock:
            last = self.cells[-1] if self.cells else None
            ending = self._done.is_set() or self._stop_event.is_set() or self._core.stopping
        if ending or last is None:
            return super().wait(timeout, echo=echo, **kwargs)
        return last.wait(timeout, raise_on_failure=raise_on_failure, echo=echo)

    def _snapshot(self) -> ClusterSnapshot:
        """The run's snapshot with the session's part (lock held): the views, state.json and the REST API read it."""
        return with_session(super()._snapshot(), self._summary())

    def _summary(self) -> dict[str, Any]:
        return session_summary(self.name, self._cells)

    def __repr__(self) -> str:
        summary = self._summary()
        return (f"<Session {self.name!r}: {len(self.state.workers)} workers, {self.status}, {summary['cells']} cells, "
                f"{summary['state']}>")

    # ------------------------------------------------------------------------------ the core's actions
    def _group(self) -> Group:
        """Where the processes are, for the session core (lock held)."""
        if self._core.stopping or self._done.is_set():
            return Group.STOPPING
        if self._core.restart_pending:
            return Group.RESTARTING
        ready = self._channel is not None and self._channel.ready(len(self.state.workers))
        return Group.READY if ready else Group.CONNECTING

    def _tell(self, event: ev.Event) -> None:
        """Give the session core one event and carry out what it decides (lock held)."""
        self._carry_out(self._cells.handle(event))

    def _carry_out(self, actions: list[ev.Action]) -> ev.InterruptOutcome | None:
        """Carry out the session core's actions, in order (lock held); the answer to a Stop, if one was asked."""
        answer = None
        for action in actions:
            match action:
                case ev.Dispatch():
                    cell = self.cells[action.cell - 1]
                    cell.begin()
                    self.channel.send("run", cell=action.cell, code=cell.code, display=cell.display,
                                      display_max_bytes=self.settings.display_max_bytes)
                case ev.SendPause():
                    self.channel.send("pause", workers=list(action.workers), cell=action.cell)
                case ev.SendResume():
                    self.channel.send("resume", workers=list(action.workers), cell=action.cell, stop_at=action.stop_at)
                case ev.SendInterrupt():
                    self.channel.send("interrupt", workers=list(action.workers), cell=action.cell)
                case ev.SendAbort():
                    self.channel.send("abort", workers=list(action.workers), cell=action.cell, reason=action.reason)
                case ev.SendSave():
                    self.channel.send("save", workers=list(action.workers), cell=action.cell,
                                      max_bytes=session_wire.SAVE_MAX_BYTES)
                case ev.CellWorkerEnded():
                    self.cells[action.cell - 1].worker_ended(action.worker, action.end)
                case ev.CellConcluded():
                    cell = self.cells[action.cell - 1]
                    cell.conclude()
                    self._to_end.append(cell)
                case ev.RestartLosingState():
                    self._handle(run_ev.RestartRequested(UserRestart(action.reason)))
                case ev.MarkProgress():
                    self._handle(run_ev.Progress(action.worker))
                case ev.DropStale():
                    self.relay.drops.note("stale", action.detail)
                case ev.FailPulls():
                    for request in self._pulls.values():
                        request.fail(action.reason)
                case ev.Answer():
                    answer = action.outcome
                    current = self._cells.current
                    if current is not None:
                        self.cells[current - 1].dirty = True
                case _:
                    assert_never(action)
        if actions:
            self._dirty = True
        return answer

    # ------------------------------------------------------------------------------ launch hooks
    def start(self) -> "Session":
        try:
            super().start()
        except BaseException:
            self._close_channels()
            raise
        return self

    def _close_channels(self) -> None:
        for channel in (self._channel, self._data):
            if channel is not None:
                channel.close()

    def _extra_env(self) -> dict[str, str]:
        return {session_wire.ENV_SESSION: self.name, session_wire.ENV_COMMANDS: self.channel.address}

    def _launch_group(self) -> None:
        if self._channel is None:  # bound where the relay is, encrypted as it is (--backend ray: CurveZMQ)
            curve = getattr(self._relay, "curve", None)
            self._channel = CommandChannel(self._key, *self.backend.relay_hosts(), curve=curve)
            self._data = DataChannel(*self.backend.relay_hosts(), curve=curve)
        self._channel.new_generation(self.state.generation)
        self._logs = LogRouter()
        self._cell_noise = self._noise_filters()
        super()._launch_group()

    # ------------------------------------------------------------------------------ supervisor hooks
    def _supervise(self) -> None:
        try:
            super()._supervise()
        finally:
            with self._lock:
                self._tell(ev.SessionEnded(self.state.status, self.state.error))
                for request in self._pulls.values():
                    request.fail(f"session {self.name!r} ended before worker {request.worker} replied")
            self._end_cells()
            self._close_channels()

    def _periodic(self) -> None:
        self._end_cells()
        super()._periodic()
        with self._lock:
            current = self.cells[self._cells.current - 1] if self._cells.current else None
        if current is not None:
            current.refresh_if_due(self.settings.flush_interval)

    def _idle(self) -> bool:
        return self._cells.current is None  # an idle session is not stalled

    def _check_requests(self) -> None:
        super()._check_requests()
        if self._channel is None:
            return
        self._channel.drain()
        self._tell(ev.Tick(self._group()))

    def _restart_scheduled(self, cause: WorkerFailure) -> None:
        self._tell(ev.GroupRestarting(str(cause), on_purpose=isinstance(cause, UserRestart)))

    def _run_failed(self, failure: WorkerFailure) -> None:
        self._tell(ev.GroupFailed(self.state.error))

    def _end_cells(self) -> None:
        with self._lock:
            cells, self._to_end = self._to_end, []
        for cell in cells:
            cell.end()

    def _apply(self, message: Message) -> None:
        content, kind = message.content, message.kind
        if content["gen"] != self.state.generation or content["worker"] >= len(self.state.workers):
            return super()._apply(message)  # counted as stale / malformed there
        index = content["worker"]
        number = self._cells.current
        current = self.cells[number - 1] if number else None
        if kind == "log":
            self._route_log(index, "".join(self._cell_noise[index].filter(content["lines"])))
        elif kind == "cell":
            self._on_cell(index, content)
            return
        elif kind == "display":
            self._on_display(index, content)
            return
        elif kind == "metrics" and current is not None:
            current.workers[index].apply_metrics(content, time.time())
            current.dirty = True
        elif kind == "status" and current is not None and content["state"] in (WorkerStatus.WAITING,
                                                                                WorkerStatus.RUNNING):
            current.workers[index].apply_status(WorkerStatus(content["state"]), content.get("detail") or "")
            current.dirty = True
        super()._apply(message)

    def _on_cell(self, index: int, content: dict[str, Any]) -> None:
        """A worker's ``cell`` message (``protocol/session_wire.py`` checked its fields) to the core."""
        if content["event"] == "start":
            self._tell(ev.Began(index, content["cell"]))
        elif content["event"] == "paused":
            self._tell(ev.Paused(index, content["cell"], content["step"]))
        elif content["event"] == "saved":
            self._tell(ev.StateSaved(index, WorkerSave(
                tuple((e["name"], e["kind"], e["detail"]) for e in content.get("saved", [])),
                tuple((e["name"], e["why"]) for e in content.get("skipped", [])),
                content.get("dir") or "", content.get("error") or "",
                tuple((e["name"], e["cell"]) for e in content.get("saved", []) if isinstance(e.get("cell"), int)))))
        elif content["event"] == "end":
            end = WorkerEnd(CellEnd(content["status"]), content.get("error") or "", content.get("traceback") or "",
                            bool(content.get("aborted")), content.get("t"), content.get("step"))
            self._tell(ev.WorkerEnded(index, content["cell"], end))
        self._dirty = True

    def _on_display(self, index: int, content: dict[str, Any]) -> None:
        """A worker's rich output (``protocol/session_wire.py`` checked its shape) to its cell, within the limits."""
        number = content["cell"]
        if number != self._cells.current:  # a cell's outputs come while it runs, before its worker's end
            self.relay.drops.note("stale", f"display for cell {number}, not the running one, from worker {index}")
            return
        try:
            mime.check_bundle(content["data"], content.get("metadata"), self.settings.display_max_bytes)
        except mime.BundleError as error:
            self.relay.drops.note("oversized", f"display from worker {index}: {error}")
            return
        cell = self.cells[number - 1]
        if not cell.add_rich(index, content["source"], content["data"], content.get("metadata") or {},
                             self.settings.display_max_outputs):
            self.relay.drops.note("oversized", f"cell {number}: more than {self.settings.display_max_outputs} "
                                  "outputs (setting display_max_outputs)")
        cell.dirty = True

    def _noise_filters(self) -> list[NoiseFilter]:
        """One filter per worker, apart from the cluster's (each keeps its own place in a line)."""
        return [NoiseFilter(noise.level) for noise in self._noise]

    def _route_log(self, index: int, text: str) -> None:
        for number in self._logs.route(self.cells, index, text):
            self._tell(ev.LogClosed(index, number))
