"""The run's supervisor core and the session core composed through the pure bridge (magics/sessions/core/bridge.py),
on one fake clock, with one queue as the run loop has: neither core calls the other. No processes, no sockets."""

from __future__ import annotations

from collections import deque

from nbworkers.magics.launch import roles
from nbworkers.magics.run.core import events as run_ev
from nbworkers.magics.run.core.failures import UserRestart
from nbworkers.magics.run.core.restart_policy import RestartPolicy
from nbworkers.magics.run.core.state import ClusterState, WorkerState
from nbworkers.magics.run.core.supervisor import Supervisor
from nbworkers.magics.run.core.timings import Timings
from nbworkers.magics.sessions.core import SessionCore, SessionTimings, bridge
from nbworkers.magics.sessions.core import events as ev
from nbworkers.magics.sessions.core.events import Group, WorkerEnd
from nbworkers.protocol.statuses import CellEnd, CellState, ClusterStatus

ABORTED = WorkerEnd(CellEnd.INTERRUPTED, "collective aborted", aborted=True)
TIMINGS = SessionTimings(peer_grace=2.0, abort_grace=5.0, interrupt_grace=10.0, pause_wait=1.0, log_close_wait=1.0)


class Composed:
    """Both cores of a two-worker session, as the run loop and the session participant compose them."""

    def __init__(self) -> None:
        self.now = 100.0
        self.state = ClusterState(name="s", run_dir="/nonexistent", workers=[WorkerState(index=i) for i in range(2)])
        self.run = Supervisor(self.state, RestartPolicy(3, 2, 1.0, 30.0), Timings(stall_timeout=60.0),
                              roles.plan(2), clock=lambda: self.now, wall=lambda: self.now)
        self.cells = SessionCore("s", 2, lambda: TIMINGS, clock=lambda: self.now)
        self.queue: deque[run_ev.Event] = deque()
        self.run_actions: list[run_ev.Action] = []
        self.session_actions: list[ev.Action] = []

    def group(self) -> Group:
        return bridge.group(ending=self.run.stopping, restart_pending=self.run.restart_pending, connected=True)

    def tell(self, event: ev.Event) -> None:
        """The participant: the session core's actions, those that need the run posted to the loop's queue."""
        for action in self.cells.handle(event):
            self.session_actions.append(action)
            request = bridge.run_event(action)
            if request is not None:
                self.post(request)

    def post(self, event: run_ev.Event) -> None:
        """The loop: one queue; each action carried out, then the participant hears of it."""
        self.queue.append(event)
        while self.queue:
            for action in self.run.handle(self.queue.popleft()):
                self.run_actions.append(action)
                session_event = bridge.session_event(action, self.state.error)
                if session_event is not None:
                    self.tell(session_event)


def test_a_second_stop_restarts_the_group_through_the_queue_and_the_cell_learns_its_state_is_gone():
    s = Composed()
    s.post(run_ev.StatusReported(0, "running"))
    s.tell(ev.Submitted(1, None, s.group()))
    assert [type(a) for a in s.session_actions] == [ev.Dispatch, ev.MarkProgress]
    s.tell(ev.InterruptRequested(None, s.group()))
    s.tell(ev.InterruptRequested(None, s.group()))  # the second Stop: the processes restart, after a save
    assert s.session_actions[-2] == ev.SendAbort(1, (0, 1), "Stop was pressed twice")
    for worker in (0, 1):
        s.tell(ev.WorkerEnded(worker, 1, ABORTED))
        s.tell(ev.StateSaved(worker, ev.WorkerSave(saved=(("x", "array", "float32 (2,)"),))))
    assert ev.RestartLosingState("Stop was pressed twice") in s.session_actions
    assert any(isinstance(a, run_ev.RestartScheduled) and isinstance(a.cause, UserRestart) for a in s.run_actions)
    assert s.cells.record(1).state == CellState.STOPPED and "cell 1" in s.cells.lost_note
    assert s.state.status == ClusterStatus.RESTARTING and s.group() == Group.RESTARTING
    assert not s.queue  # everything asked was handled, in order, by one drain


def test_a_worker_killed_by_hand_the_live_one_saves_before_the_group_is_stopped():
    s = Composed()
    s.post(run_ev.HoldRestarts(TIMINGS.save_wait))  # the session participant, at the run's start
    s.post(run_ev.StatusReported(0, "running"))
    s.tell(ev.Submitted(1, None, s.group()))
    s.tell(ev.WorkerEnded(0, 1, WorkerEnd(CellEnd.OK)))
    s.tell(ev.WorkerEnded(1, 1, WorkerEnd(CellEnd.OK)))
    s.tell(ev.Tick(s.group()))
    s.now += TIMINGS.log_close_wait
    s.tell(ev.Tick(s.group()))
    assert s.cells.record(1).state == CellState.FINISHED
    s.post(run_ev.Exited(((1, -9, ""),)))  # kill -9 of worker 1
    assert [type(a) for a in s.run_actions] == [run_ev.SaveBeforeRestart]  # not stopped yet
    assert s.session_actions[-1] == ev.SendSave(1, (0,), holder=0)
    s.tell(ev.StateSaved(0, ev.WorkerSave(saved=(("model", "model", "4 weights"),))))
    assert [type(a) for a in s.run_actions] == [run_ev.SaveBeforeRestart, run_ev.StopGroup,
                                                run_ev.RestartScheduled]
    assert "worker 0 saved model (Keras model: 4 weights)" in s.cells.lost_note
    assert "- worker 1 was gone before the save (killed)" in s.cells.lost_note


def test_a_failed_run_fails_the_running_cell():
    s = Composed()
    s.tell(ev.Submitted(1, None, s.group()))
    s.tell(ev.Began(0, 1))
    s.post(run_ev.Exited(((0, 1, "boom"),)))  # a worker's error exit: the policy fails the run (code 1)
    assert [type(a) for a in s.run_actions] == [run_ev.StopGroup, run_ev.Failed]
    assert s.cells.record(1).state == CellState.FAILED and "worker 0 exited with code 1" in s.cells.record(1).error


def test_the_bridge_maps_each_decision_once():
    restart = run_ev.RestartScheduled(UserRestart("Restart pressed"))
    assert bridge.session_event(restart, "") == ev.GroupRestarting("Restart pressed", on_purpose=True)
    assert bridge.session_event(run_ev.KillGroup(), "") is None
    request = bridge.run_event(ev.RestartLosingState("why"))
    assert isinstance(request, run_ev.RestartRequested) and str(request.cause) == "why"
    assert bridge.run_event(ev.MarkProgress(0)) == run_ev.Progress(0)  # a cell event: the run is not stalled
    assert bridge.run_event(ev.SendSave((0,), 1)) is None
    assert bridge.run_event(ev.SaveFinished()) == run_ev.SaveEnded()
    assert request.saved  # the session saved already: the supervisor does not hold it
    held = run_ev.SaveBeforeRestart(UserRestart("Restart pressed"), (0, 1))
    assert bridge.session_event(held, "") == ev.SaveRequested("Restart pressed", (0, 1), on_purpose=True)
    assert bridge.group(ending=True, restart_pending=True, connected=True) == Group.STOPPING
    assert bridge.group(ending=False, restart_pending=False, connected=False) == Group.CONNECTING
