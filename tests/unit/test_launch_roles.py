"""Cluster roles without TensorFlow: the tasks --chief / --evaluator / --ps give, their TF_CONFIG, distlib's
task() for each role and the role checks. What a real kernel shows for role mistakes, and an evaluator reading a
real dataset: tests/integration/test_roles_kernel.py."""

from __future__ import annotations

import json

import pytest

from nbworkers.distlib.cluster import TFConfigError, parse_tf_config, task
from nbworkers.distlib.dirs import write_dir
from nbworkers.distlib.worker.roles import ENV_SERVE, evaluation_metrics, serves
from nbworkers.magics.launch import roles
from nbworkers.magics.launch.roles import RoleError, check_roles, code_names
from nbworkers.magics.frameworks.tensorflow import tf_configs
from nbworkers.magics.launch.tfconfig import Task, plan_tasks

PORTS = [2000 + i for i in range(8)]


def configs(tasks):
    return [json.loads(c) for c in tf_configs(tasks, "localhost", PORTS[: len(tasks)])]


def test_plain_workers_are_unchanged():
    assert plan_tasks(2) == [Task("worker", 0), Task("worker", 1)]
    assert configs(plan_tasks(2))[1] == {
        "cluster": {"worker": ["localhost:2000", "localhost:2001"]}, "task": {"type": "worker", "index": 1},
    }


def test_chief_comes_first_and_takes_the_chiefs_duties():
    tasks = plan_tasks(2, chief=True)
    assert [t.label for t in tasks] == ["chief 0", "worker 0", "worker 1"]
    assert all(t.awaited and not t.serves for t in tasks)
    cfg = configs(tasks)
    assert cfg[0]["cluster"] == {"chief": ["localhost:2000"], "worker": ["localhost:2001", "localhost:2002"]}
    infos = [parse_tf_config(json.dumps(c)) for c in cfg]
    assert [i.is_chief for i in infos] == [True, False, False]
    assert [i.worker_id for i in infos] == [0, 1, 2] and {i.num_workers for i in infos} == {3}


def test_parameter_servers_imply_a_chief_and_make_workers_serve():
    tasks = plan_tasks(2, ps=1, evaluator=True)
    assert [(t.role, t.index, t.serves, t.awaited) for t in tasks] == [
        ("chief", 0, False, True), ("worker", 0, True, False), ("worker", 1, True, False),
        ("ps", 0, True, False), ("evaluator", 0, False, False),
    ]
    cfg = configs(tasks)
    training = {"chief": ["localhost:2000"], "worker": ["localhost:2001", "localhost:2002"], "ps": ["localhost:2003"]}
    assert all(c["cluster"] == training for c in cfg), "every task, the evaluator too, sees the training cluster"
    assert [c["task"] for c in cfg] == [
        {"type": "chief", "index": 0}, {"type": "worker", "index": 0}, {"type": "worker", "index": 1},
        {"type": "ps", "index": 0}, {"type": "evaluator", "index": 0},
    ]
    infos = [parse_tf_config(json.dumps(c)) for c in cfg]
    assert [i.is_coordinator for i in infos] == [True, False, False, False, False]
    assert [i.is_chief for i in infos] == [True, False, False, False, False]
    assert infos[4].is_evaluator and infos[4].uses_parameter_servers
    # Estimator cells keep the cell on every task: train_and_evaluate runs the ps/worker roles itself
    assert not any(t.serves for t in roles.plan(2, ps=1, cell="tf.estimator.train_and_evaluate(e, t, v)"))
    assert [t.serves for t in roles.plan(2, ps=1, cell="s = tf.distribute.ParameterServerStrategy(r)")] == [
        False, True, True, True]


def test_evaluator_is_outside_the_training_cluster():
    cfg = configs(plan_tasks(2, evaluator=True))
    assert cfg[2] == {"cluster": {"worker": ["localhost:2000", "localhost:2001"]}, "task": {"type": "evaluator", "index": 0}}
    info = parse_tf_config(json.dumps(cfg[2]))
    assert (info.type, info.index, info.is_chief, info.num_workers) == ("evaluator", 0, False, 2)
    workers = [parse_tf_config(json.dumps(c)) for c in cfg[:2]]
    assert [w.is_chief for w in workers] == [True, False], "without --chief worker 0 stays the chief"
    # the other layout TensorFlow accepts: an evaluator entry with one address
    inside = {"cluster": {"worker": ["h:1"], "evaluator": ["h:2"]}, "task": {"type": "evaluator", "index": 0}}
    assert parse_tf_config(json.dumps(inside)).is_evaluator
    with pytest.raises(TFConfigError, match="at most one"):
        parse_tf_config(json.dumps({"cluster": {"worker": ["h:1"]}, "task": {"type": "evaluator", "index": 1}}))
    with pytest.raises(TFConfigError, match="more than one 'evaluator'"):
        parse_tf_config(json.dumps({"cluster": {"worker": ["h:1"], "evaluator": ["h:2", "h:3"]},
                                    "task": {"type": "evaluator", "index": 0}}))


def test_write_dir_follows_the_roles(tmp_path):
    cfg = configs(plan_tasks(1, chief=True, evaluator=True))
    target = tmp_path / "ckpt"
    chief, worker, evaluator = (write_dir(target, parse_tf_config(json.dumps(c))) for c in cfg)
    try:
        assert chief.path == str(target) and not chief.is_private
        assert worker.is_private and evaluator.is_private
        assert str(target) not in (worker.path, evaluator.path)
    finally:
        worker.cleanup()
        evaluator.cleanup()


def test_servers_are_told_by_the_launcher():
    server, cell = roles.plan(1, ps=1)[1], roles.plan(1, ps=1)[0]
    assert roles.task_env(server) == {ENV_SERVE: "1"} and roles.task_env(cell) == {}
    assert serves({ENV_SERVE: "1"}) and not serves({}) and not serves({ENV_SERVE: "0"})


def test_unawaited_tasks_retire_servers_at_once_the_evaluator_after_its_grace():
    tasks = plan_tasks(1, ps=1, evaluator=True)  # chief, worker (server), ps, evaluator
    assert roles.due_for_retirement(tasks, 0.0, grace=30) == [1, 2]
    assert roles.due_for_retirement(tasks, 30.0, grace=30) == [1, 2, 3]
    assert roles.due_for_retirement(plan_tasks(2), 99.0, grace=0) == []


def test_evaluation_results_become_metrics():
    step, metrics = evaluation_metrics({"loss": 0.5, "accuracy": 0.75, "global_step": 20, "note": "x"})
    assert step == 20 and metrics == {"loss": 0.5, "accuracy": 0.75}


@pytest.mark.parametrize("line, cell, message", [
    (dict(workers=2, ps=0), "", "--ps 0: give the number of parameter servers"),
    (dict(workers=2, evaluator=2), "", "at most one evaluator"),
    (dict(workers=0, evaluator=1), "", "-n 0: the evaluator evaluates the checkpoints"),
    (dict(workers=0, ps=1), "", "ParameterServerStrategy needs at least one worker"),
    (dict(workers=2, ps=1), "s = tf.distribute.MultiWorkerMirroredStrategy()", "uses MultiWorkerMirroredStrategy, which has no parameter servers"),
    (dict(workers=2), "s = tf.distribute.ParameterServerStrategy(r)", "add --ps N"),
])
def test_role_mistakes_are_caught(line, cell, message):
    args = {"chief": False, "evaluator": 0, "ps": None, **line}
    with pytest.raises(RoleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_roles(args["workers"], args["chief"], args["evaluator"], args["ps"], cell)


def test_strategy_names_come_from_code_not_comments():
    cell = '# we used MultiWorkerMirroredStrategy before\ndoc = "MultiWorkerMirroredStrategy"\ns = tf.distribute.ParameterServerStrategy(r)\n'
    assert "MultiWorkerMirroredStrategy" not in code_names(cell)
    check_roles(2, False, 0, 1, cell)  # fine: the code uses ParameterServerStrategy
    check_roles(2, False, 0, 1, "strategy = distlib.strategy()")  # distlib picks ParameterServerStrategy
    check_roles(2, True, 1, None, "strategy = tf.distribute.MultiWorkerMirroredStrategy()")


def test_task_without_tf_config_is_a_local_chief():
    assert task({}).is_chief and not task({}).is_evaluator
