"""A session's cell lifecycle, as a state machine: ``SessionCore.handle(event) -> [action]``.

No threads, sockets, processes or TensorFlow here: ``Session`` (``magics/sessions/session.py``) turns what it saw
into events (``magics/sessions/core/events.py``), hands them in and carries out the actions it gets back (send a
command, tell a cell's views, restart the processes). Time comes from an injected ``clock`` (seconds,
monotonic), the grace periods from an injected ``timings`` (read at each use: a user may change the settings while
the session runs), so every path is unit-tested in milliseconds (tests/unit/test_session_core.py):

- queue: cells run one at a time, in order, once every worker is connected (``Group.READY``); a failed cell
  cancels the queued ones.
- peer grace: one worker's error gives the others ``session_peer_grace`` seconds to end the cell too, then their
  collectives are aborted (``SendAbort``); no end ``session_abort_grace`` later restarts the processes.
- interrupt (Stop): the workers pause at a report point, then all raise KeyboardInterrupt at the same step
  (``SendPause``, ``SendResume``; ``SendInterrupt`` for a cell that does not report). A cell still running
  ``session_interrupt_grace`` seconds later, or a second Stop, restarts the processes.
- restart that loses state: aborted collectives cannot be used again, a stuck cell cannot be reached, so the core
  restarts the processes. First the workers that ended the cell save their namespaces (``SendSave``; worker 0's
  models and variables, every worker's arrays and values: ``distlib/saved_state/namespace.py``), for at most
  ``save_wait`` seconds; then it asks for ``RestartLosingState``; the supervisor restarts the group and answers
  ``GroupRestarting``, and the core ends the running cell, cancels the queue and says which cells' state is gone
  from the processes and what was saved (``lost_note``, ``saved_state.SavedState``). A restart the supervisor
  decided (a worker killed, Restart) comes first as ``SaveRequested``: the same save, then ``SaveFinished``.

Composition, not a shared core: the supervisor core (``magics/run/core/supervisor.py``) decides about processes
(every ``%%worker`` run has one, session or not) and this core about cells. They never call each other: the
shell turns this core's ``RestartLosingState`` into the supervisor's ``RestartRequested``, and the supervisor's
``RestartScheduled`` / ``Failed`` and the run's end into this core's ``GroupRestarting`` / ``GroupFailed`` /
``SessionEnded``. So the supervisor and its tests stay as they are for plain runs, and each core is small enough to
read at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import assert_never

from nbworkers.magics.sessions.core import events as ev
from nbworkers.magics.sessions.core import notes, restart_save
from nbworkers.magics.sessions.core.events import Group, InterruptOutcome
from nbworkers.magics.sessions.core.notes import error_text, nothing_lost, stop_note, with_notes, workers_text
from nbworkers.magics.sessions.core.records import CellRecord, SessionTimings, cells_phrase
from nbworkers.magics.sessions.core.restart_save import Outcome, Saving
from nbworkers.magics.sessions.core.saved_state import SavedState
from nbworkers.protocol.statuses import CellEnd, CellState, ClusterStatus


class SessionCore:
    def __init__(self, name: str, workers: int, timings: Callable[[], SessionTimings], *,
                 clock: Callable[[], float]):
        self.name = name
        self.workers = workers
        self.timings = timings
        self.clock = clock
        self.records: list[CellRecord] = []  # each cell's lifecycle (the participant's SessionCell shows it)
        self.queue: deque[int] = deque()
        self.current: int | None = None
        self.alive_from = 1  # the first cell whose state lives in the current processes
        self.lost_note = ""  # what the last restart of the processes lost
        self._restart: Outcome | None = None  # a restart was asked for; the running cell ends this way
        self._saving: Saving | None = None  # that restart waits for the workers' save
        self._save: SavedState | None = None  # the answers to the save of the restart asked for
        self.saved: SavedState | None = None  # what the workers saved before the last restart they saved for

    # ------------------------------------------------------------------------------------- queries
    def record(self, number: int) -> CellRecord:
        return self.records[number - 1]

    def live_cells(self) -> str:
        """The cells whose state the current processes hold ("cells [3], [5] and [8]", "cells [3]-[12]", "cell 3",
        "no cell"): what a restart of them loses (the Restart button's confirmation and the note after it say so)."""
        ran = [c.ref for c in self.records if c.number >= self.alive_from and c.started_at is not None and c.ref]
        if len(ran) < 2:
            return f"cell {ran[0]}" if ran else "no cell"
        listed = ran[0].startswith("[") and len(ran) <= 3  # a notebook's numbers are not a run of the session's
        return f"cells {', '.join(ran[:-1])} and {ran[-1]}" if listed else f"cells {ran[0]}-{ran[-1]}"

    @property
    def user_cells(self) -> int:
        """How many cells the user submitted (nbworkers' own, such as a restore, are not counted)."""
        return sum(1 for c in self.records if c.shown is not None)

    def rerun(self, cell: CellRecord) -> str:
        """What to run to run ``cell`` again: "cell [5]" (the notebook's), "session cell 3", or the ``%workers`` line
        that ran nbworkers' own cell (its label is that action: ``%workers restore NAME``)."""
        return cells_phrase([cell.ref]) if cell.ref else f"`%workers {cell.label} {self.name}`"

    @property
    def busy(self) -> bool:
        return self.current is not None or bool(self.queue)

    @property
    def last_pending(self) -> int | None:
        """The cell a call made now runs after: the last queued one, else the running one."""
        return self.queue[-1] if self.queue else self.current

    # ------------------------------------------------------------------------------------- events
    def handle(self, event: ev.Event) -> list[ev.Action]:
        """Apply one event; the actions the session must carry out, in order. The match covers the whole
        ``Event`` union (``assert_never``): an event without a case fails mypy."""
        match event:
            case ev.Submitted():
                if event.cell != len(self.records) + 1:
                    raise ValueError(f"cell {event.cell} submitted after {len(self.records)} cells")
                shown = None if event.label else self.user_cells + 1
                self.records.append(CellRecord(event.cell, event.timeout, shown=shown, label=event.label,
                                               prompt=event.prompt))
                self.queue.append(event.cell)
                return self._dispatch(event.group)
            case ev.Tick():
                if self._saving is not None:  # the restart waits for the save, at most save_wait seconds
                    return self._save_waited()
                # while a restart is on its way, its GroupRestarting ends the running cell
                actions = (self._check_cell(self.record(self.current), event.group)
                           if self.current and self._restart is None else [])
                return actions + self._dispatch(event.group)
            case ev.InterruptRequested():
                outcome, actions = self._interrupt(event.cell, event.group)
                return actions + [ev.Answer(outcome)]
            case ev.Began():
                return [self._stale(event.cell, event.worker) if self.current != event.cell
                        else ev.MarkProgress(event.worker)]
            case ev.Pausing():
                if self.current != event.cell:
                    return [self._stale(event.cell, event.worker)]
                self.record(event.cell).pausing.add(event.worker)
                return [ev.MarkProgress(event.worker)]
            case ev.Paused():
                if self.current != event.cell:
                    return [self._stale(event.cell, event.worker)]
                self.record(event.cell).paused[event.worker] = event.step
                return [ev.MarkProgress(event.worker)]
            case ev.WorkerEnded():
                return self._worker_ended(event) + self._save_once_ended(event)
            case ev.LogClosed():
                if 0 < event.cell <= len(self.records):
                    self.record(event.cell).closed_logs.add(event.worker)
                return []
            case ev.StateSaved():
                return self._state_saved(event)
            case ev.GroupRestarting():
                return self._group_restarting(event)
            case ev.SaveRequested():
                return self._save_requested(event)
            case ev.GroupFailed():
                self._restart, self._saving, self._save = None, None, None
                reason = f"the session failed: {event.error}"
                return self._conclude_current(CellState.FAILED, reason) + self._cancel_queue(f"not run: {reason}")
            case ev.SessionEnded():
                self._restart, self._saving, self._save = None, None, None
                reason = f"the session ended ({event.status})" + (f": {event.error}" if event.error else "")
                state = CellState.FAILED if event.status == ClusterStatus.FAILED else CellState.STOPPED
                return self._conclude_current(state, reason) + self._cancel_queue(reason)
            case _:
                assert_never(event)

    def _dispatch(self, group: Group) -> list[ev.Action]:
        """The next queued cell, once no cell runs, every worker is ready and no restart was asked for."""
        if self.current is not None or not self.queue or group != Group.READY or self._restart is not None:
            return []
        cell = self.record(self.queue.popleft())
        self.current = cell.number
        cell.state, cell.started_at = CellState.RUNNING, self.clock()
        return [ev.Dispatch(cell.number), ev.MarkProgress()]

    def _worker_ended(self, event: ev.WorkerEnded) -> list[ev.Action]:
        if self.current != event.cell:
            return [self._stale(event.cell, event.worker)]
        cell = self.record(event.cell)
        actions: list[ev.Action] = []
        if event.worker not in cell.ends:
            end = notes.peer_aborted(event.end, event.worker, cell.first_error_worker)  # "aborted: worker 1 failed"
            cell.ends[event.worker] = end
            if end.status == CellEnd.ERROR and cell.first_error_worker is None:
                cell.first_error_worker, cell.first_error_at = event.worker, self.clock()
            if len(cell.ends) == self.workers:
                cell.all_ended_at = self.clock()
            actions.append(ev.CellWorkerEnded(cell.number, event.worker, end))
        return actions + [ev.MarkProgress(event.worker)]

    def _check_cell(self, cell: CellRecord, group: Group) -> list[ev.Action]:
        """The running cell's end, its --timeout and grace periods (every supervisor round)."""
        now, timings = self.clock(), self.timings()
        running = tuple(w for w in range(self.workers) if w not in cell.ends)
        if not running:
            if len(cell.closed_logs) >= self.workers or now - cell.all_ended_at >= timings.log_close_wait:
                return self._finish(cell, group)
            return []
        actions: list[ev.Action] = []
        if (cell.timeout and cell.started_at is not None and now - cell.started_at > cell.timeout
                and cell.interrupted_at is None):
            cell.error = f"timed out after {cell.timeout:g} s (--timeout)"
            cell.timed_out = True
            actions += self._interrupt(cell.number, group)[1]
        if cell.interrupted_at is not None and not cell.resumed:
            actions += self._stop_at_common_step(cell, running, now, timings)
        peers_late = cell.first_error_at is not None and now - cell.first_error_at >= timings.peer_grace
        if peers_late and cell.aborted_at is None:
            cell.aborted_at = now
            reason = f"worker {cell.first_error_worker} of session {self.name!r} failed in {cell.title}"
            actions.append(ev.SendAbort(cell.number, running, reason))
        elif cell.aborted_at is not None and now - cell.aborted_at >= timings.abort_grace:
            actions += self._ask_restart(f"{workers_text(running)} did not end {cell.title} after an abort", group,
                                         Outcome(CellState.FAILED, error_text(cell)))
        elif cell.interrupted_at is not None and now - cell.interrupted_at >= timings.interrupt_grace:
            actions += self._ask_restart(f"{workers_text(running)} did not end {cell.title} "
                                         f"{timings.interrupt_grace:g} s after Stop (stuck in a collective)", group,
                                         Outcome(CellState.STOPPED))
        return actions

    def _interrupt(self, number: int | None, group: Group) -> tuple[InterruptOutcome, list[ev.Action]]:
        """Stop the running cell (KeyboardInterrupt on every worker); a queued cell is cancelled instead. A second
        Stop of the same cell restarts the processes."""
        if number is not None and number != self.current:
            if number in self.queue:
                self.queue.remove(number)
                return InterruptOutcome.CANCELLED, self._conclude(self.record(number), CellState.CANCELLED,
                                                                  "cancelled before it ran (Stop)")
            return InterruptOutcome.NOT_RUNNING, []
        if self.current is None:
            return InterruptOutcome.IDLE, []
        cell = self.record(self.current)
        cell.interrupts += 1
        if cell.interrupts >= 2:
            return InterruptOutcome.RESTARTING, self._ask_restart("Stop was pressed twice", group,
                                                                  Outcome(CellState.STOPPED), end_running=True)
        cell.interrupted_at = self.clock()
        pending = tuple(w for w in range(self.workers) if w not in cell.ends)
        return InterruptOutcome.INTERRUPTING, [ev.SendPause(cell.number, pending)]  # then resume(stop_at)

    def _stop_at_common_step(self, cell: CellRecord, running: tuple[int, ...], now: float,
                             timings: SessionTimings) -> list[ev.Action]:
        """Stop: every worker raises KeyboardInterrupt at the same step. Workers at a training step pause and
        say their step; one that did not pause within session_pause_wait is inside the next step's collective,
        waiting for the paused ones: all stop one step later. No worker paused: when one said it is inside a step
        (``pausing``), wait for the first to pause (the interrupt grace still ends a stuck cell); else no worker is
        in a step (a cell with no step at all, or its Python work after the training), and every worker gets a plain
        KeyboardInterrupt."""
        paused = {w: step for w, step in cell.paused.items() if w in running}
        waited = cell.interrupted_at is not None and now - cell.interrupted_at >= timings.pause_wait
        if paused and (len(paused) == len(running) or waited):
            cell.resumed = True
            stop_at = max(paused.values()) + (0 if len(paused) == len(running) else 1)
            return [ev.SendResume(cell.number, running, stop_at)]
        if waited and not cell.pausing & set(running):
            cell.resumed = True
            return [ev.SendInterrupt(cell.number, running)]
        return []

    def _finish(self, cell: CellRecord, group: Group) -> list[ev.Action]:
        """Every worker ended the cell: how it ended, and whether the processes must restart."""
        aborted = [w for w, end in cell.ends.items() if end.aborted]
        statuses = {w: end.status for w, end in cell.ends.items()}
        if CellEnd.ERROR in statuses.values():
            error = error_text(cell)
            failed = tuple(sorted(w for w, s in statuses.items() if s == CellEnd.ERROR))
            if aborted:
                return self._ask_restart(f"worker {cell.first_error_worker} failed while {workers_text(aborted)} "
                                         "waited in a collective, which had to be aborted", group,
                                         Outcome(CellState.FAILED, error, failed))
            return self._conclude(cell, CellState.FAILED, with_notes(error, [nothing_lost(self.rerun(cell),
                                                                                         self.live_cells())]), failed)
        if CellEnd.INTERRUPTED in statuses.values():
            actions = self._conclude(cell, CellState.FAILED if cell.timed_out else CellState.STOPPED,
                                     cell.error or stop_note(cell))
            if aborted:
                actions += self._ask_restart("collectives were aborted while stopping the cell", group,
                                             Outcome(CellState.STOPPED), cell)
            return actions
        return self._conclude(cell, CellState.FINISHED)

    # ------------------------------------------------------------------------------------- transitions
    def _conclude(self, cell: CellRecord, state: CellState, error: str = "",
                  failed: tuple[int, ...] = ()) -> list[ev.Action]:
        if cell.state.is_terminal:
            return []
        cell.state, cell.error, cell.failed_workers = state, error, failed
        if cell.number == self.current:
            self.current = None
        actions: list[ev.Action] = [ev.CellConcluded(cell.number, state)]
        if state == CellState.FAILED and self.queue:
            actions += self._cancel_queue(f"not run: {cell.title} failed")
        return actions

    def _conclude_current(self, state: CellState, error: str, failed: tuple[int, ...] = ()) -> list[ev.Action]:
        return self._conclude(self.record(self.current), state, error, failed) if self.current else []

    def _cancel_queue(self, reason: str) -> list[ev.Action]:
        actions: list[ev.Action] = []
        while self.queue:
            actions += self._conclude(self.record(self.queue.popleft()), CellState.CANCELLED, reason)
        return actions

    def _ask_restart(self, reason: str, group: Group, outcome: Outcome, ended: CellRecord | None = None,
                     end_running: bool = False) -> list[ev.Action]:
        """Restart the processes on purpose (collectives unusable, a stuck cell, the second Stop): their state is
        lost, but for what the workers that ended the cell (the running one, or ``ended``) save first; with
        ``end_running`` the others are told to end it (abort) and save once they did."""
        if not group.can_restart or self._restart is not None:
            return []
        self._restart = outcome
        cell = ended or (self.record(self.current) if self.current else None)
        if cell is None:
            return [ev.RestartLosingState(reason)]
        running = tuple(w for w in range(self.workers) if w not in cell.ends) if end_running else ()
        return self._begin_save(cell, tuple(sorted(cell.ends)), running, reason, held=False)

    def _save_requested(self, event: ev.SaveRequested) -> list[ev.Action]:
        """The supervisor holds a restart (a worker killed, the Restart button): the workers still alive save
        first, those still in the running cell once they ended it (aborted); the killed ones' state is lost."""
        if self._saving is not None:  # this core's own save is under way: the supervisor's restart waits for it
            self._saving.held = True
            return []
        if self._restart is not None:  # this core's restart was asked already, after its save
            return [ev.SaveFinished()]
        self._restart = Outcome(CellState.STOPPED if event.on_purpose else CellState.FAILED)
        ran = [c for c in self.records if c.number >= self.alive_from and c.started_at is not None]
        if not ran:  # no cell ran in these processes: nothing to save
            return [ev.SaveFinished()]
        cell, alive = ran[-1], set(event.alive)
        in_cell = cell.number == self.current
        savers = tuple(sorted(w for w in (cell.ends if in_cell else alive) if w in alive))
        running = tuple(sorted(alive - set(cell.ends))) if in_cell else ()
        gone = tuple(w for w in range(self.workers) if w not in alive)
        return self._begin_save(cell, savers, running, event.cause, held=True, gone=gone)

    def _begin_save(self, cell: CellRecord, savers: tuple[int, ...], running: tuple[int, ...], reason: str, *,
                    held: bool, gone: tuple[int, ...] = ()) -> list[ev.Action]:
        """Ask ``savers`` to save now and tell ``running`` to end the cell (each saves once it did)."""
        if not savers and not running:
            return [ev.SaveFinished()] if held else [ev.RestartLosingState(reason)]
        holder = restart_save.pick_holder(savers, cell.ends)
        self._saving = Saving(self.clock(), reason, held, set(running))
        self._save = SavedState(cell.title, savers, wait=self.timings().save_wait, holder=holder, gone=gone,
                                shown={c.number: c.ref for c in self.records},
                                aborted=tuple(w for w in savers if w in cell.ends and cell.ends[w].aborted))
        actions: list[ev.Action] = [ev.SendAbort(cell.number, running, reason)] if running else []
        return actions + ([ev.SendSave(cell.number, savers, holder)] if savers else [])

    def _save_once_ended(self, event: ev.WorkerEnded) -> list[ev.Action]:
        """A worker told to end the cell before the restart did: it saves now."""
        saving, saved = self._saving, self._save
        if saving is None or saved is None or event.worker not in saving.awaiting:
            return []
        saving.awaiting.discard(event.worker)
        saved.asked += (event.worker,)
        if saved.holder == restart_save.NO_HOLDER:  # the first to end the cell saves the models and variables
            saved.holder = event.worker
        return [ev.SendSave(event.cell, (event.worker,), saved.holder)]

    def _state_saved(self, event: ev.StateSaved) -> list[ev.Action]:
        saved, saving = self._save, self._saving
        if saving is None or saved is None or event.worker not in saved.unanswered:
            return [ev.DropStale(f"saved message from worker {event.worker}, no save asked of it")]
        saved.reports[event.worker] = event.report
        actions: list[ev.Action] = [ev.MarkProgress(event.worker)]
        return actions + (self._restart_after_save() if not saved.unanswered and not saving.awaiting else [])

    def _save_waited(self) -> list[ev.Action]:
        """Workers told to end the cell get ``abort_grace`` seconds (then they are not saved), the save
        ``save_wait`` seconds in all."""
        assert self._saving is not None and self._save is not None
        waited, timings = self.clock() - self._saving.asked_at, self.timings()
        if self._saving.awaiting and waited >= timings.abort_grace:
            self._save.not_ended += tuple(sorted(self._saving.awaiting))
            self._saving.awaiting.clear()
            if not self._save.unanswered:
                return self._restart_after_save()
        return self._restart_after_save() if waited >= timings.save_wait else []

    def _restart_after_save(self) -> list[ev.Action]:
        assert self._saving is not None and self._save is not None
        saving, self._saving = self._saving, None
        self._save.not_ended += tuple(sorted(saving.awaiting))
        return [ev.SaveFinished()] if saving.held else [ev.RestartLosingState(saving.reason)]

    def _group_restarting(self, event: ev.GroupRestarting) -> list[ev.Action]:
        lost = self.live_cells()
        saved = self._save if self._restart is not None else None  # the save for this restart (done or cut short)
        self._saving, self._save = None, None
        if saved is not None:
            self.saved = saved
            self.lost_note = (f"the session's processes restart ({event.cause}): the state of {lost} is gone from "
                              f"them\n{saved.note(self.name)}")
        else:
            self.lost_note = (f"the session's processes restart ({event.cause}): the state of {lost} is gone "
                              "(variables, models, datasets)\n- run: the cells that build what you need again")
        # the Restart button (on purpose) ends the running cell as stopped, a failure as failed
        outcome = self._restart or Outcome(CellState.STOPPED if event.on_purpose else CellState.FAILED)
        self._restart = None
        error = with_notes(outcome.error, [f"lost: {self.lost_note}"])  # the list, then the traceback once, last
        actions = self._conclude_current(outcome.state, error, outcome.failed)
        actions += self._cancel_queue(f"not run: {self.lost_note}")
        self.alive_from = len(self.records) + 1
        return actions + [ev.FailPulls(f"not answered: {self.lost_note}")]

    def _stale(self, cell: int, worker: int) -> ev.DropStale:
        return ev.DropStale(f"cell {cell} message from worker {worker}")

