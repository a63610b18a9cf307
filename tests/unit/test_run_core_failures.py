"""How a worker's exit is classified (magics/run/core/failures.py) and how the views show each restart: its
kind, its cause and where the group resumed. No processes."""

from __future__ import annotations

from nbworkers.magics.run.core.failures import (
    NODE_LOST_MARKER,
    NodeLost,
    PeerLost,
    PortCollision,
    RestartsExhausted,
    WorkerCrashed,
    WorkerEndedEarly,
    WorkerPreempted,
    WorkerRaised,
    classify_exit,
    root_cause,
)
from nbworkers.magics.run.core.restart_policy import RestartPolicy
from nbworkers.protocol.wire import ENDED_EARLY_EXIT_CODE


def test_an_exit_with_0_before_the_cells_end_is_classified_by_the_hosts_line_not_by_its_code_alone():
    tail = "HALF-WAY\n--- nbworkers: ended early: the worker exited with code 0 before the end of its cell (its last " \
           "output: HALF-WAY)\n"
    early = classify_exit(1, ENDED_EARLY_EXIT_CODE, tail)
    assert isinstance(early, WorkerEndedEarly) and early.retryable
    assert str(early) == "worker 1 exited with code 0 before the end of its cell (its last output: HALF-WAY)"
    assert isinstance(classify_exit(1, ENDED_EARLY_EXIT_CODE, "sys.exit(86) in the cell\n"), WorkerRaised)
    assert isinstance(root_cause([classify_exit(0, 1, "UnavailableError: Socket closed"), early]), WorkerEndedEarly)


def test_classification_of_exits():
    assert isinstance(classify_exit(1, -9, ""), WorkerCrashed)
    assert isinstance(classify_exit(1, 137, ""), WorkerCrashed)
    assert isinstance(classify_exit(1, -15, ""), WorkerPreempted)
    assert isinstance(classify_exit(1, -2, ""), WorkerPreempted)  # a stop's SIGINT (130 from the worker): asked to go
    assert isinstance(classify_exit(1, 42, ""), WorkerPreempted)
    assert isinstance(classify_exit(0, 1, "E grpc_server_lib Could not start gRPC server"), PortCollision)
    assert isinstance(classify_exit(0, 1, "Traceback...\nValueError: shapes differ"), WorkerRaised)
    peer = classify_exit(0, 1, "Traceback...\ntensorflow.python.framework.errors_impl.UnavailableError: Socket closed")
    assert isinstance(peer, PeerLost)
    crash = classify_exit(1, -9, "")
    assert root_cause([peer, crash]) is crash
    # the restart policy's part (every rule: tests/unit/test_run_core_restart_policy.py)
    raised = classify_exit(0, 1, "ValueError: x")
    assert not RestartPolicy(3, 3, 1.0, 30.0).decide(raised).restart
    assert RestartPolicy(1, 3, 1.0, 30.0).decide(crash).restart
    assert isinstance(RestartPolicy(0, 3, 1.0, 30.0).decide(crash).failure, RestartsExhausted)
    policy = RestartPolicy(3, 3, 1.0, 30.0)
    assert policy.decide(crash).restart
    assert not policy.decide(classify_exit(1, -9, "")).restart, "the same error twice is permanent"


def test_a_lost_node_is_its_own_restartable_failure_and_the_root_cause():
    tail = f"epoch 2\n{NODE_LOST_MARKER} Ray node 127.0.0.3 node 0a1b2c3d (hosting worker 1) is dead (ActorDiedError)\n"
    lost = classify_exit(1, -9, tail)
    assert isinstance(lost, NodeLost) and lost.retryable and lost.worker == 1
    assert "127.0.0.3" in str(lost) and "is dead" in str(lost)
    peer = classify_exit(0, 1, "Traceback...\ntensorflow.python.framework.errors_impl.UnavailableError: Socket closed")
    assert root_cause([peer, classify_exit(0, -9, ""), lost]) is lost
    # an old note, followed by a later run's output, is not this exit's cause
    assert isinstance(classify_exit(1, -9, tail + "restarting\nepoch 3\nepoch 4\n"), WorkerCrashed)
    # each node lost is a new failure (a second node's loss is no repeat of the first)
    policy = RestartPolicy(3, 3, 1.0, 30.0)
    assert policy.decide(lost).restart
    assert policy.decide(classify_exit(0, -9, tail.replace("127.0.0.3", "127.0.0.2"))).restart


def test_views_show_each_restart_its_kind_cause_and_where_it_resumed():
    from nbworkers.magics.views.summary import render_summary_html, render_text

    snapshot = {
        "name": "x", "status": "finished", "workers": [], "restarts": 1, "wall_time": 3.0,
        "restart_history": [{"generation": 1, "kind": "WorkerCrashed", "cause": "worker 1 was killed by SIGKILL",
                             "worker": 1, "resumed_from": {"epoch": 2, "step": 0}}],
    }
    for shown in (render_text(snapshot), render_summary_html(snapshot)):
        assert "WorkerCrashed: worker 1 was killed by SIGKILL; resumed from a checkpoint at epoch 2, step 0" in shown
