"""The restart policy alone (magics/run/core/restart_policy.py): every rule, without processes or a clock."""

from __future__ import annotations

import pytest

from nbworkers.magics.run.core.failures import (
    GroupStalled,
    PeerLost,
    PortCollision,
    RelaunchFailed,
    RestartsExhausted,
    RunTimedOut,
    UserRestart,
    WorkerCrashed,
    WorkerPreempted,
    WorkerRaised,
    classify_exit,
)
from nbworkers.magics.run.core.restart_policy import Action, RestartPolicy


def policy(max_restarts=3, port_retries=2, backoff=1.0, backoff_max=5.0) -> RestartPolicy:
    return RestartPolicy(max_restarts, port_retries, backoff, backoff_max)


def crash(worker=1, line="") -> WorkerCrashed:
    return WorkerCrashed(f"worker {worker} was killed by SIGKILL", worker, line)


@pytest.mark.parametrize("failure", [
    WorkerRaised("worker 0 exited with code 1: ValueError: x", 0, "ValueError: x"),
    RunTimedOut("the run timed out after 5 s (--timeout)"),
    RelaunchFailed("the group could not be started again: too few nodes"),
])
def test_a_failure_that_is_not_retryable_fails_at_once_and_uses_nothing(failure):
    p = policy()
    decision = p.decide(failure)
    assert decision.action is Action.FAIL and not decision.restart
    assert decision.failure is failure and "not retryable" in decision.why
    assert (p.restarts_left, p.port_retries_left, p.restarts_done) == (3, 2, 0)


@pytest.mark.parametrize("failure", [
    crash(), WorkerPreempted("worker 0 was preempted", 0), PeerLost("worker 1 lost a peer", 1),
    GroupStalled("no worker reported progress for 3 s (--stall-timeout)"),
])
def test_a_retryable_failure_restarts_and_uses_one_restart(failure):
    p = policy()
    decision = p.decide(failure)
    assert decision.action is Action.RESTART and decision.failure is failure
    assert decision.backoff == 1.0
    assert p.restarts_left == 2 and p.port_retries_left == 2


def test_back_off_doubles_with_each_restart_up_to_its_maximum():
    p = policy(max_restarts=10, backoff=1.0, backoff_max=5.0)
    backoffs = []
    for worker in range(5):  # different workers: never "the same error twice"
        backoffs.append(p.decide(crash(worker)).backoff)
    assert backoffs == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_restarts_of_every_kind_count_for_the_back_off():
    p = policy(backoff=1.0, backoff_max=100.0)
    assert p.decide(UserRestart("restart requested")).backoff == 0.0
    assert p.decide(PortCollision("port", 0)).backoff == 0.0
    assert p.decide(crash()).backoff == 4.0  # the third restart of the run


def test_exhausted_restarts_fail_as_restarts_exhausted_naming_the_limit():
    p = policy(max_restarts=1)
    assert p.decide(crash(0)).restart
    last = crash(1, "boom")
    decision = p.decide(last)
    assert decision.action is Action.FAIL and decision.why == "no restarts left"
    assert isinstance(decision.failure, RestartsExhausted)
    assert "--max-restarts 1" in str(decision.failure) and str(last) in str(decision.failure)
    assert decision.failure.worker == 1 and decision.failure.log_tail == "boom"


def test_no_restarts_at_all():
    decision = policy(max_restarts=0).decide(crash())
    assert isinstance(decision.failure, RestartsExhausted) and "--max-restarts 0" in str(decision.failure)


def test_port_collisions_use_port_retries_not_restarts_then_fail_as_themselves():
    p = policy(max_restarts=0, port_retries=2)
    collision = classify_exit(0, 1, "E grpc_server_lib Could not start gRPC server")
    assert isinstance(collision, PortCollision)
    first, second = p.decide(collision), p.decide(collision)  # the same race twice is still a race
    assert first.restart and second.restart and first.backoff == second.backoff == 0.0
    assert p.port_retries_left == 0 and p.restarts_left == 0
    third = p.decide(collision)
    assert third.action is Action.FAIL and third.failure is collision and "no port retries left" in third.why


def test_the_same_error_twice_in_a_row_is_permanent():
    p = policy()
    assert p.decide(crash(1)).restart
    decision = p.decide(crash(1))
    assert decision.action is Action.FAIL and decision.failure.kind == "WorkerCrashed"
    assert "same error twice" in decision.why and p.restarts_left == 2


def test_progress_between_two_identical_errors_makes_the_second_bad_luck_again():
    p = policy()
    assert p.decide(crash(1)).restart
    p.progressed()
    assert p.decide(crash(1)).restart and p.restarts_left == 1


def test_a_user_restart_is_not_a_failure():
    p = policy(max_restarts=0, port_retries=0)
    for _ in range(3):
        decision = p.decide(UserRestart("restart requested"))
        assert decision.restart and decision.backoff == 0.0 and "not a failure" in decision.why
    assert p.restarts_left == 0 and p.restarts_done == 3


def test_a_user_restart_between_two_identical_errors_does_not_hide_the_repeat():
    p = policy(max_restarts=3)
    assert p.decide(crash(1)).restart
    assert p.decide(UserRestart("restart requested")).restart
    assert not p.decide(crash(1)).restart  # still the same error twice (no progress in between)


def test_from_settings_takes_the_cells_limit_over_the_setting():
    class Settings:
        max_restarts, port_retries, restart_backoff, restart_backoff_max = 3, 4, 0.5, 8.0

    assert RestartPolicy.from_settings(Settings()).restarts_left == 3
    p = RestartPolicy.from_settings(Settings(), max_restarts=0)
    assert (p.restarts_left, p.port_retries_left, p.backoff, p.backoff_max) == (0, 4, 0.5, 8.0)


def test_a_lost_peer_is_recognised_behind_tensorflows_long_graph_stack(tmp_path):
    """A forked worker's "Detected at node ... defined at" stack runs ~27 lines past the UnavailableError line:
    a 25-line tail once made that a plain error (permanent) instead of a lost peer (restart)."""
    stack = "".join(f"  File \"/x/frame{i}.py\", line {i}, in f{i}\n\n" for i in range(14))
    tail = ("Traceback (most recent call last):\n"
            "tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:\n\n"
            "Detected at node sgd_1/CollectiveReduceV2 defined at (most recent call last):\n" + stack +
            "Collective ops is aborted by: recvmsg:Connection reset by peer\n"
            "\t [[{{node sgd_1/CollectiveReduceV2}}]] [Op:__inference_train_step_326]\n")
    log = tmp_path / "worker-1.log"
    log.write_text("--- nbworkers: worker 1\n" * 50 + tail)
    from nbworkers.magics.run import worker_group

    read = worker_group.read_tail(log, worker_group.EXIT_LOG_TAIL_LINES)  # what is read of an exited worker's log
    assert isinstance(classify_exit(1, 1, read), PeerLost)
