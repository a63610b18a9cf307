"""Elastic groups (``-n N --min-workers M``): the rules (magics/run/core/elastic.py), the supervisor core's size
changes on its fake clock (magics/run/core/supervisor.py), the Ray capacity estimate
(magics/backends/ray/capacity.py), the flags' checks and the words the views use. No Ray, no processes."""

from __future__ import annotations

import signal
import threading
from argparse import Namespace

import pytest
from supervisor_run import Run, kinds

from nbworkers.magics.backends.ray.capacity import placeable
from nbworkers.magics.errors import LaunchError
from nbworkers.magics.notebook.parse import check_min_workers
from nbworkers.magics.run.capacity import CapacityLooks
from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.core.elastic import Elastic, growth
from nbworkers.magics.run.core.state import WorkerState
from nbworkers.magics.views.words import headline, restart_lines
from nbworkers.protocol.statuses import ClusterStatus as C

NODE_LOST = "--- nbworkers: node lost: Ray node 127.0.0.4 node 0a1b2c3d is dead"


def elastic_run(workers: int = 3, least: int = 2, capacity: int | None = None) -> Run:
    run = Run(workers=workers, backoff=0.0)
    run.core.elastic = Elastic(workers, least)
    run.core.new_worker = lambda i: WorkerState(index=i, log_path=f"/logs/worker-{i}.log")
    run.state.elastic = {"min": least, "max": workers}
    if capacity is not None:
        run.send(ev.CapacitySeen(capacity))
    return run


def running(run: Run) -> None:
    for i in range(len(run.state.workers)):
        run.send(ev.Metrics(i, {"epoch": 1, "step": 1}))
    assert run.state.status == C.RUNNING


def test_the_rules():
    bounds = Elastic(4, 2)
    assert [bounds.size_for(c) for c in (0, 1, 2, 3, 4, 9)] == [0, 1, 2, 3, 4, 4]
    assert [bounds.fits(c) for c in (1, 2, 5)] == [False, True, True]
    assert bounds.growth(2, 3) == 3 and bounds.growth(2, 9) == 4 and bounds.growth(4, 9) is None
    assert bounds.growth(3, 2) is None  # less room is no reason to restart a running group
    with pytest.raises(ValueError):
        Elastic(2, 3)
    assert growth(None, 2, 5)[0] is None and "--min-workers" in growth(None, 2, 5)[1]
    assert growth(bounds, 2, 4, busy="restarting") == (None, "not now: the group is restarting")
    assert "no change" in growth(bounds, 4, 4)[1]


def test_a_lost_node_with_no_spare_shrinks_the_group_to_the_workers_left():
    run = elastic_run(capacity=3)
    running(run)
    run.exit((2, -signal.SIGKILL, NODE_LOST))  # the lost node's worker; the others are stopped
    run.exit((0, -signal.SIGTERM, ""), (1, -signal.SIGTERM, ""))
    run.send(ev.CapacitySeen(2))  # the shell looks before the relaunch: two nodes left
    actions = run.tick()
    assert kinds(actions) == ["Relaunch"] and actions[0].attempt.cause.kind == "NodeLost"
    assert len(run.state.workers) == 2 and len(run.core.tasks) == 2
    entry = run.state.restart_history[-1]
    assert entry["kind"] == "NodeLost" and entry["workers"] == [3, 2]
    assert "(3 -> 2 workers)" in run.state.workers[0].log_tail.lines()[-1]
    snapshot = run.state.snapshot()
    assert "2 of 3 workers (elastic, min 2)" in headline(snapshot)
    assert "shrank from 3 to 2 workers" in restart_lines(snapshot)[0]


def test_below_min_workers_the_run_fails_saying_what_to_do():
    run = elastic_run(capacity=3)
    running(run)
    run.exit((2, -signal.SIGKILL, NODE_LOST))
    run.exit((0, -signal.SIGTERM, ""), (1, -signal.SIGTERM, ""))
    run.send(ev.CapacitySeen(1))
    actions = run.tick()
    assert "Failed" in kinds(actions) and "Relaunch" not in kinds(actions)
    assert run.state.failure_kind == "TooFewWorkers" and run.state.status == C.FAILED
    assert "room for 1 worker(s)" in run.state.error and "--min-workers 2" in run.state.error
    assert run.core.ended and len(run.state.workers) == 3  # the state keeps the group that ran


def test_room_that_returns_grows_the_group_back_from_its_checkpoint_using_up_no_restart():
    run = elastic_run(capacity=2)
    run.state.resize(2, run.core.new_worker)  # a group that started at 2 of 3
    run.core.tasks = run.core.tasks[:2]
    running(run)
    restarts_left = run.core.policy.restarts_left
    actions = run.send(ev.CapacitySeen(3))
    assert kinds(actions) == ["StopGroup", "RestartScheduled"] and actions[1].cause.kind == "CapacityReturned"
    run.exit((0, -signal.SIGTERM, ""), (1, -signal.SIGTERM, ""))
    actions = run.tick()
    assert kinds(actions) == ["Relaunch"] and len(run.state.workers) == 3
    assert run.state.workers[2].log_path == "/logs/worker-2.log"
    assert run.state.restart_history[-1]["workers"] == [2, 3] and run.core.policy.restarts_left == restarts_left
    assert "grew from 2 to 3 workers" in restart_lines(run.state.snapshot())[0]


def test_no_growth_while_starting_stopping_or_at_full_size_and_the_user_is_told_why():
    run = elastic_run(capacity=2)
    run.state.resize(2, run.core.new_worker)
    assert run.send(ev.CapacitySeen(3)) == []  # still starting: the periodic look waits for a running group
    running(run)
    assert run.send(ev.CapacitySeen(2, asked=True)) == [] and run.core.resize_note.startswith("no change")
    run.send(ev.StopRequested())
    assert run.send(ev.CapacitySeen(3, asked=True)) == [] and "not now" in run.core.resize_note
    fixed = Run()
    assert fixed.send(ev.CapacitySeen(9, asked=True)) == [] and "not elastic" in fixed.core.resize_note


def test_a_look_that_fails_is_an_event_for_the_core_not_a_write_into_it():
    run = elastic_run(capacity=2)
    run.state.resize(2, run.core.new_worker)  # 2 of 3: the periodic look is due

    class Unreachable:
        def capacity(self) -> int:
            raise ConnectionError("gcs")

    posted: list[ev.Event] = []
    CapacityLooks(Unreachable(), interval=0.0, clock=lambda: 5.0).look(run.core, posted.append, threading.Lock())
    assert posted == [ev.CapacityUnknown("ConnectionError: gcs")] and "did not answer" not in run.core.resize_note
    assert run.send(posted[0]) == [] and run.core.resize_note == "the cluster did not answer (ConnectionError: gcs)"


def test_a_fixed_size_group_ignores_capacity_at_relaunch():
    run = Run(backoff=0.0)
    run.send(ev.CapacitySeen(1))
    run.exit((1, -signal.SIGKILL, NODE_LOST))
    run.exit((0, -signal.SIGTERM, ""))
    assert kinds(run.tick()) == ["Relaunch"] and len(run.state.workers) == 2
    assert "workers" not in run.state.restart_history[-1] and "elastic" not in run.state.snapshot()


NODES = [{"NodeID": "head", "Alive": True, "Resources": {"CPU": 0.0}},
         {"NodeID": "a", "Alive": True, "Resources": {"CPU": 1.0}},
         {"NodeID": "b", "Alive": True, "Resources": {"CPU": 1.0}},
         {"NodeID": "c", "Alive": False, "Resources": {"CPU": 1.0}},
         {"NodeID": "d", "Alive": True, "Resources": {"CPU": 4.0, "GPU": 2.0}}]


def test_ray_capacity_counts_free_resources_plus_the_runs_own_group_on_live_nodes():
    # the run holds a, b and the dead c; d's 4 CPUs are free
    assert placeable(NODES, {"CPU": 4.0, "GPU": 2.0}, ["a", "b", "c"], cpus=1.0) == 6
    assert placeable(NODES, {"CPU": 4.0, "GPU": 2.0}, ["a", "b", "c"], cpus=1.0, spread=True) == 3  # a, b, d
    assert placeable(NODES, {"CPU": 4.0, "GPU": 2.0}, [], cpus=1.0, gpus=1) == 2
    assert placeable(NODES, {"CPU": 0.3}, [], cpus=0.1) == 3  # no float rounding down
    assert placeable(NODES, {}, ["c"], cpus=1.0) == 0


def check(**flags) -> None:
    check_min_workers(Namespace(**{"workers": 4, "backend": "ray", "chief": False, "evaluator": 0, "ps": None,
                                   **flags}))


def test_the_flag_is_checked_before_anything_starts():
    check(min_workers=None, backend="local")
    check(min_workers=2)
    check(min_workers=4)
    with pytest.raises(LaunchError, match="give 1 to -n"):
        check(min_workers=5)
    with pytest.raises(LaunchError, match="give 1 to -n"):
        check(min_workers=0)
    with pytest.raises(LaunchError, match="only for the Ray backend"):
        check(min_workers=2, backend="local")
    with pytest.raises(LaunchError, match="--chief"):
        check(min_workers=2, chief=True)
