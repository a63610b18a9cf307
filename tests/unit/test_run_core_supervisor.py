"""The supervisor core (magics/run/core/supervisor.py) driven by events and a fake clock: no processes, no TensorFlow,
no threads. Each test checks the decisions (actions), the status sequence of the run and its workers' statuses."""

from __future__ import annotations

import signal

from supervisor_run import Run, kinds

from nbworkers.magics.launch import roles
from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.core.failures import UserRestart
from nbworkers.protocol.statuses import ClusterStatus as C
from nbworkers.protocol.statuses import WorkerStatus as W

PORT_TAKEN_LOG = "E grpc_server_lib Could not start gRPC server"
RAISED_LOG = "Traceback (most recent call last):\n  File \"cell.py\", line 3\nValueError: shapes differ"


def test_a_run_that_finishes():
    run = Run()
    run.send(ev.StatusReported(0, "waiting", "connecting"))
    assert run.state.status == C.RUNNING and run.workers() == [W.WAITING, W.STARTING]
    run.send(ev.Metrics(1, {"epoch": 1, "step": 3, "metrics": {"loss": 0.5}}))
    assert run.workers() == [W.WAITING, W.RUNNING]
    assert run.exit((0, 0, ""), (1, 0, "")) == []
    assert run.workers() == [W.FINISHED, W.FINISHED] and run.core.ended
    assert kinds(run.end()) == ["KillGroup"]
    assert run.statuses == [C.STARTING, C.RUNNING, C.FINISHED] and run.state.ended == run.clock.now
    assert C(run.state.status).is_terminal and run.state.error == ""


def test_a_crash_restarts_the_whole_group_after_its_back_off():
    run = Run(backoff=2.0)
    run.send(ev.StatusReported(0, "running"))
    actions = run.exit((1, -signal.SIGKILL, ""))
    assert kinds(actions) == ["StopGroup", "RestartScheduled"]
    assert actions[1].cause.kind == "WorkerCrashed" and actions[1].cause.worker == 1
    assert run.state.status == C.RESTARTING and run.workers() == [W.RESTARTING, W.RESTARTING]
    run.exit((0, -signal.SIGTERM, ""))  # stopped by us for the restart: not a second failure
    assert run.workers() == [W.RESTARTING, W.RESTARTING] and run.state.failure_kind == ""
    assert not run.core.ended  # gone, but a restart is due
    assert run.tick(1.9) == []  # the back-off
    actions = run.tick(0.2)
    assert kinds(actions) == ["Relaunch"] and actions[0].attempt.generation == 1
    assert actions[0].attempt.cause.kind == "WorkerCrashed" and run.core.attempt is actions[0].attempt
    assert run.state.generation == 1 and run.state.restarts == 1
    assert run.workers() == [W.STARTING, W.STARTING] and all(w.exit_code is None for w in run.state.workers)
    assert [w.restarts for w in run.state.workers] == [1, 1]
    entry = run.state.restart_history[0]
    assert entry["kind"] == "WorkerCrashed" and entry["worker"] == 1 and "SIGKILL" in entry["cause"]
    run.send(ev.Metrics(0, {"epoch": 2, "step": 0}))
    assert entry["resumed_from"] == {"epoch": 2, "step": 0}
    run.exit((0, 0, ""), (1, 0, ""))
    run.end()
    assert run.statuses == [C.STARTING, C.RUNNING, C.RESTARTING, C.STARTING, C.RUNNING, C.FINISHED]


def test_a_node_lost_late_becomes_the_restarts_cause():
    """Ray declares a node dead seconds after its loss; the peer on a live node often fails first."""
    run = Run(backoff=0.0)
    actions = run.exit((0, 1, "Traceback...\ntensorflow.python.framework.errors_impl.UnavailableError: Socket closed"))
    assert actions[1].cause.kind == "PeerLost"
    run.exit((1, -signal.SIGKILL, "--- nbworkers: node lost: Ray node 127.0.0.3 node 0a1b2c3d is dead"))
    actions = run.tick(0.1)
    assert kinds(actions) == ["Relaunch"] and actions[0].attempt.cause.kind == "NodeLost"
    entry = run.state.restart_history[0]
    assert entry["kind"] == "NodeLost" and entry["worker"] == 1 and "127.0.0.3" in entry["cause"]


def test_a_kill_seen_a_loop_after_its_peers_loss_becomes_the_restarts_cause():
    """kill -9 of worker 1: worker 0's "lost a peer" exit may reach the kernel first; the crash explains it."""
    run = Run(backoff=0.5)
    actions = run.exit((0, 1, "Traceback...\ntensorflow.python.framework.errors_impl.UnavailableError: Socket closed"))
    assert actions[1].cause.kind == "PeerLost"
    run.clock.now += 0.2
    run.exit((1, -signal.SIGKILL, ""))
    assert kinds(run.tick(0.5)) == ["Relaunch"]
    entry = run.state.restart_history[0]
    assert entry["kind"] == "WorkerCrashed" and entry["worker"] == 1 and "SIGKILL" in entry["cause"]


def test_a_kill_after_the_stops_grace_was_ours_and_changes_no_cause():
    run = Run(backoff=0.5, stop_grace=1.0)
    run.exit((0, 1, "Traceback...\ntensorflow.python.framework.errors_impl.UnavailableError: Socket closed"))
    run.clock.now += 1.5  # past the stop's grace: the host's own SIGKILL of a worker that ignored SIGTERM
    run.exit((1, -signal.SIGKILL, ""))
    run.exit()
    assert kinds(run.tick(0.0)) == ["Relaunch"] and run.state.restart_history[0]["kind"] == "PeerLost"


def test_our_own_sigterm_and_a_users_restart_keep_their_cause():
    run = Run(backoff=0.5)
    run.exit((0, 1, "Traceback...\ntensorflow.python.framework.errors_impl.UnavailableError: Socket closed"))
    run.exit((1, -signal.SIGTERM, ""))  # the stop for the restart
    assert kinds(run.tick(0.5)) == ["Relaunch"] and run.state.restart_history[0]["kind"] == "PeerLost"
    user = Run(backoff=0.5)
    user.send(ev.RestartRequested(UserRestart("restart requested")))
    user.exit((0, -signal.SIGKILL, ""), (1, -signal.SIGTERM, ""))
    assert kinds(user.tick(0.5)) == ["Relaunch"] and user.state.restart_history[0]["kind"] == "UserRestart"


def test_the_second_restart_waits_twice_as_long():
    run = Run(backoff=1.0)
    run.exit((1, -9, ""), (0, -15, ""))
    assert kinds(run.tick(1.0)) == ["Relaunch"]
    run.exit((0, -9, ""), (1, -15, ""))  # another worker this time: not "the same error twice"
    assert run.tick(1.5) == [] and kinds(run.tick(0.5)) == ["Relaunch"]
    assert run.state.restarts == 2


def test_port_collision_restarts_at_once_without_using_restarts_then_fails():
    run = Run(max_restarts=0, port_retries=1)
    actions = run.exit((0, 1, PORT_TAKEN_LOG), (1, 0, ""))
    assert kinds(actions) == ["StopGroup", "RestartScheduled"] and actions[1].cause.kind == "PortCollision"
    assert kinds(run.tick()) == ["Relaunch"]  # no back-off
    run.exit((0, 1, PORT_TAKEN_LOG), (1, 0, ""))
    assert run.state.status == C.FAILED and run.state.failure_kind == "PortCollision"
    run.end()
    assert run.statuses == [C.STARTING, C.RESTARTING, C.STARTING, C.FAILED]


def test_exhausted_restarts_fail_the_run_and_stop_the_others():
    run = Run(max_restarts=0)
    run.send(ev.StatusReported(0, "running"))
    actions = run.exit((0, -9, ""))
    assert kinds(actions) == ["StopGroup", "Failed"] and actions[1].failure.kind == "RestartsExhausted"
    assert run.state.status == C.FAILED and run.state.failure_kind == "RestartsExhausted"
    assert "--max-restarts 0" in run.state.error and run.state.error.endswith(".")
    assert run.workers() == [W.FAILED, W.STARTING]
    run.exit((1, -15, ""))  # the survivor, stopped because of the failure
    assert run.workers() == [W.FAILED, W.STOPPED]
    run.end()
    assert run.statuses == [C.STARTING, C.RUNNING, C.FAILED]


def test_an_exception_in_the_cell_fails_without_a_restart_and_the_root_cause_wins():
    run = Run(max_restarts=3)
    peer = "Traceback...\ntensorflow.python.framework.errors_impl.UnavailableError: Socket closed"
    actions = run.exit((0, 1, peer), (1, 1, RAISED_LOG))
    assert kinds(actions) == ["StopGroup", "Failed"]
    assert run.state.failure_kind == "WorkerRaised" and "ValueError: shapes differ" in run.state.error
    assert run.state.restarts == 0 and run.core.policy.restarts_left == 3
    assert run.workers() == [W.FAILED, W.FAILED]


def test_the_same_error_twice_fails_after_one_restart():
    run = Run(max_restarts=3, backoff=0.0)
    run.exit((1, -9, ""), (0, -15, ""))
    assert kinds(run.tick()) == ["Relaunch"]
    run.exit((1, -9, ""))
    assert run.state.status == C.FAILED and run.state.failure_kind == "WorkerCrashed"


def test_a_user_stop_is_not_a_failure():
    run = Run()
    run.send(ev.StatusReported(0, "running"))
    assert kinds(run.send(ev.StopRequested())) == ["StopGroup"]
    assert run.state.status == C.STOPPING and not C.STOPPING.is_terminal
    assert run.send(ev.StopRequested()) == []  # once
    run.exit((0, -15, "Traceback...\nKeyboardInterrupt"), (1, -9, ""))
    assert run.workers() == [W.STOPPED, W.STOPPED]
    run.end()
    assert run.statuses == [C.STARTING, C.RUNNING, C.STOPPING, C.STOPPED]
    assert run.state.failure_kind == "" and run.state.error == "" and run.state.restarts == 0
    assert not any(isinstance(a, ev.Failed) for a in run.actions)


def test_workers_interrupted_by_a_stop_read_stopped_not_failed():
    """A stop's SIGINT: each worker's finally blocks run, then it exits 130 (the kernel reads -2), saying nothing."""
    run = Run()
    run.send(ev.StatusReported(0, "running"))
    run.send(ev.StopRequested())
    assert run.exit((0, -signal.SIGINT, ""), (1, -signal.SIGINT, "")) == []
    assert run.workers() == [W.STOPPED, W.STOPPED]
    run.end()
    assert run.state.status == C.STOPPED and run.state.failure_kind == "" and run.state.error == ""
    assert not any(isinstance(a, ev.Failed) for a in run.actions)


def test_a_failure_stops_the_others_with_an_interrupt_and_they_read_stopped():
    run = Run(max_restarts=0)
    actions = run.exit((1, 1, RAISED_LOG))
    assert kinds(actions) == ["StopGroup", "Failed"]
    run.exit((0, -signal.SIGINT, ""))  # worker 0, interrupted by the stop
    assert run.workers() == [W.STOPPED, W.FAILED]
    run.end()
    assert run.state.status == C.FAILED and run.state.failure_kind == "WorkerRaised"


def test_an_interrupt_of_our_restart_stop_changes_no_cause():
    """Within the stop's grace, a worker the restart's stop interrupted exits -2: ours, not a second cause."""
    run = Run(backoff=0.5)
    run.exit((0, 1, "Traceback...\ntensorflow.python.framework.errors_impl.UnavailableError: Socket closed"))
    run.exit((1, -signal.SIGINT, ""))
    assert kinds(run.tick(0.5)) == ["Relaunch"] and run.state.restart_history[0]["kind"] == "PeerLost"


def test_a_stop_cancels_a_pending_restart():
    run = Run(backoff=10.0)
    run.exit((1, -9, ""))
    run.send(ev.StopRequested())
    run.exit((0, -15, ""))
    assert run.tick(1.0) == [] and run.core.ended  # no Relaunch
    run.end()
    assert run.statuses == [C.STARTING, C.RESTARTING, C.STOPPING, C.STOPPED] and run.state.restarts == 0


def test_the_kill_deadline_follows_a_stop_once():
    run = Run(stop_grace=5.0, kill_margin=2.0)
    run.send(ev.StopRequested())
    assert run.tick(6.9) == []
    assert kinds(run.tick(0.2)) == ["KillGroup"]
    assert run.tick(10.0) == []


def test_a_stalled_group_gets_its_stacks_dumped_then_restarts():
    run = Run(stall_timeout=10.0, stack_dump_wait=3.0, backoff=0.0)
    assert run.tick(9.0) == []
    run.send(ev.Progress(0))  # a log line: the silence starts again
    assert run.tick(9.0) == []
    assert kinds(run.tick(1.0)) == ["DumpStacks"]
    run.send(ev.Progress(0))  # the stacks themselves: not counted as progress
    assert run.tick(2.9) == []
    actions = run.tick(0.1)
    assert kinds(actions) == ["StopGroup", "RestartScheduled"] and actions[1].cause.kind == "GroupStalled"
    assert "no worker reported progress for 10 s" in str(actions[1].cause)
    run.exit((0, -15, ""), (1, -15, ""))
    assert kinds(run.tick()) == ["Relaunch"]
    assert run.tick(9.9) == []  # the new attempt measures its own silence
    assert kinds(run.tick(0.1)) == ["DumpStacks"]


def test_a_stalled_group_with_no_restarts_left_fails():
    run = Run(stall_timeout=10.0, stack_dump_wait=3.0, max_restarts=0)
    run.tick(10.0)
    actions = run.tick(3.0)
    assert kinds(actions) == ["StopGroup", "Failed"] and run.state.failure_kind == "RestartsExhausted"
    assert "no worker reported progress for 10 s" in run.state.error


def test_an_idle_session_is_never_stalled():
    run = Run(stall_timeout=10.0)
    for _ in range(5):
        assert run.tick(10.0, idle=True) == []
    assert kinds(run.tick(10.0)) == ["DumpStacks"]


def test_the_run_timeout_fails_the_run():
    run = Run(run_timeout=60.0)
    assert run.tick(59.0) == []
    actions = run.tick(2.0)
    assert kinds(actions) == ["StopGroup", "Failed"] and run.state.failure_kind == "RunTimedOut"
    assert "timed out after 60 s" in run.state.error
    assert kinds(run.tick(100.0)) == ["KillGroup"]  # the stop's kill deadline; failed once


def test_a_timeout_during_a_pending_restart_does_not_relaunch():
    run = Run(run_timeout=60.0, backoff=30.0)
    run.exit((0, -9, ""), (1, -15, ""))
    run.tick(61.0)
    assert run.state.status == C.FAILED and run.core.ended
    assert kinds(run.tick(100.0)) == ["KillGroup"] and run.state.generation == 0


def test_a_restart_request_uses_no_restart_and_is_ignored_while_stopping():
    run = Run(max_restarts=0)
    actions = run.send(ev.RestartRequested())
    assert kinds(actions) == ["StopGroup", "RestartScheduled"] and isinstance(actions[1].cause, UserRestart)
    assert run.send(ev.RestartRequested()) == []  # one pending already
    run.exit((0, -15, ""), (1, -15, ""))
    assert kinds(run.tick()) == ["Relaunch"] and run.state.restart_history[0]["kind"] == "UserRestart"
    run.send(ev.StopRequested())
    assert run.send(ev.RestartRequested()) == []


def test_a_relaunch_that_cannot_start_fails_the_run():
    run = Run(backoff=0.0)
    run.exit((0, -9, ""), (1, -15, ""))
    run.tick()
    actions = run.send(ev.LaunchFailed("2 workers asked for, 1 node left", launched=1))
    assert kinds(actions) == ["StopGroup", "Failed"] and run.state.failure_kind == "RelaunchFailed"
    assert "1 node left" in run.state.error
    # worker 1 was never started: no exit of its will come, so the run ends once worker 0's process has exited
    assert run.state.workers[1].status == W.FAILED and "not started" in run.state.workers[1].detail
    assert not run.core.ended
    run.exit((0, -9, ""))
    assert run.core.ended
    run.end()
    assert run.state.status == C.FAILED


def test_a_relaunch_that_started_no_worker_ends_the_run_at_once():
    run = Run(backoff=0.0)
    run.exit((0, -9, ""), (1, -15, ""))
    run.tick()
    run.send(ev.LaunchFailed("Ray did not start the actors within 120 s"))
    assert run.core.ended and run.workers() == [W.FAILED, W.FAILED]
    run.end()
    assert run.state.status == C.FAILED and "120 s" in run.state.error


def test_servers_are_retired_when_training_ends_and_the_run_finishes():
    tasks = roles.plan(2, ps=1)  # chief, 2 serving workers, 1 ps
    run = Run(tasks=tasks)
    assert [t.awaited for t in tasks] == [True, False, False, False]
    assert run.tick() == []
    run.exit((0, 0, ""))
    actions = run.tick()
    assert kinds(actions) == ["RetireWorker"] * 3 and [a.index for a in actions] == [1, 2, 3]
    assert run.tick() == []  # once
    assert run.state.workers[3].detail == "server stopped: the coordinator finished"
    run.exit((1, -15, ""), (2, -15, ""), (3, -9, ""))
    assert run.workers() == [W.FINISHED] * 4
    run.end()
    assert run.state.status == C.FINISHED


def test_an_evaluator_gets_its_grace_after_training():
    run = Run(tasks=roles.plan(2, evaluator=1), evaluator_grace=60.0)
    run.exit((0, 0, ""), (1, 0, ""))
    assert run.tick() == [] and run.tick(59.0) == []  # training ended at the first look
    actions = run.tick(1.0)
    assert kinds(actions) == ["RetireWorker"] and actions[0].index == 2


def test_a_parameter_server_that_dies_fails_the_run():
    run = Run(tasks=roles.plan(2, ps=1), max_restarts=0)
    run.exit((3, -9, ""))
    assert run.state.status == C.FAILED and run.workers()[3] == W.FAILED
    run.exit((0, -15, ""), (1, -15, ""), (2, -15, ""))
    assert run.workers() == [W.STOPPED, W.STOPPED, W.STOPPED, W.FAILED]


def test_a_crash_of_the_supervisor_fails_the_run():
    run = Run()
    actions = run.send(ev.SupervisorCrashed("Traceback ...\nKeyError: 3"))
    assert kinds(actions) == ["KillGroup"] and run.state.status == C.FAILED
    assert run.state.error.startswith("nbworkers supervisor crashed:") and "KeyError: 3" in run.state.error


def test_statuses_are_the_strings_of_the_state_file():
    import json

    run = Run(max_restarts=0)
    run.exit((0, -9, ""))
    snapshot = run.state.snapshot()  # plain strings: the state file, the REST API, repr() for attach and tests
    assert type(snapshot["status"]) is str and all(type(w["status"]) is str for w in snapshot["workers"])
    data = json.loads(json.dumps(snapshot))
    assert data["status"] == "failed" and [w["status"] for w in data["workers"]] == ["failed", "starting"]
    assert C("lost").is_terminal and not W("restarting").is_terminal
