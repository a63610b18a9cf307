"""A restart held while a session saves (magics/run/core/save_hold.py, in the supervisor core): fake clock, no
processes. The group is stopped only once the session's save ended, its wait passed, or every process is gone."""

from __future__ import annotations

import signal

from supervisor_run import Run, kinds

from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.core.failures import UserRestart
from nbworkers.magics.run.core.save_hold import HOLD_MARGIN
from nbworkers.protocol.statuses import ClusterStatus as C


def held_run(wait: float = 10.0, workers: int = 2) -> Run:
    run = Run(workers=workers, backoff=0.0)
    run.send(ev.HoldRestarts(wait))
    run.send(ev.StatusReported(0, "running"))
    return run


def test_a_killed_worker_asks_the_live_ones_to_save_before_the_group_stops():
    run = held_run(workers=3)
    actions = run.exit((1, -signal.SIGKILL, ""))
    assert kinds(actions) == ["SaveBeforeRestart"]
    assert actions[0].alive == (0, 2) and actions[0].cause.kind == "WorkerCrashed"
    assert run.state.status == C.RESTARTING and run.core.restart_pending
    assert run.tick(1.0) == []  # held: the live workers are saving
    actions = run.send(ev.SaveEnded())
    assert kinds(actions) == ["StopGroup", "RestartScheduled"] and actions[1].cause.worker == 1
    assert run.send(ev.SaveEnded()) == []  # once
    run.exit((0, -signal.SIGINT, ""), (2, -signal.SIGINT, ""))
    assert kinds(run.tick(0.1)) == ["Relaunch"]


def test_the_restart_button_is_held_but_a_sessions_own_restart_after_its_save_is_not():
    run = held_run()
    assert kinds(run.send(ev.RestartRequested())) == ["SaveBeforeRestart"]
    run2 = held_run()
    actions = run2.send(ev.RestartRequested(UserRestart("Stop was pressed twice"), saved=True))
    assert kinds(actions) == ["StopGroup", "RestartScheduled"]


def test_the_hold_is_bounded_by_the_wait_and_ends_when_every_process_is_gone():
    run = held_run(wait=10.0)
    run.exit((1, -signal.SIGKILL, ""))
    assert run.tick(10.0 + HOLD_MARGIN - 0.1) == []
    assert kinds(run.tick(0.2)) == ["StopGroup", "RestartScheduled"]
    run = held_run(wait=10.0)
    run.exit((1, -signal.SIGKILL, ""))
    run.exit((0, 1, "RuntimeError: lost its peer"))  # nobody left to save
    assert kinds(run.tick(0.0)) == ["StopGroup", "RestartScheduled", "Relaunch"]


def test_without_a_hold_and_on_a_stop_nothing_waits():
    run = Run(backoff=0.0)
    assert kinds(run.exit((1, -signal.SIGKILL, ""))) == ["StopGroup", "RestartScheduled"]
    run = held_run()
    run.exit((1, -signal.SIGKILL, ""))
    assert kinds(run.send(ev.StopRequested())) == ["StopGroup"]
    assert run.send(ev.SaveEnded()) == [] and run.tick(100.0) == [ev.KillGroup()]
