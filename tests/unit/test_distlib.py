"""distlib pieces that need no TensorFlow: TF_CONFIG checks, write dirs, collective selection, reporting.

The GPU tests use mocked GPU counts: these machines have no GPU. They check the decisions (NCCL vs RING,
unequal counts) that ``strategy()`` and the MultiWorkerMirroredStrategy patch hand to TensorFlow; the real
2-worker test in test_distlib_data.py runs the cross-worker exchange itself with mocked counts.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types

import pytest

from nbworkers.distlib import cluster, collectives, dirs, reporting
from nbworkers.distlib.compat import import_hooks
from nbworkers.distlib.compat.keras3 import fit_guard
from nbworkers.distlib.worker.mwms import leader_wait
from nbworkers.magics.run.relay import RelayReceiver
from nbworkers.protocol import wire

SUBPROCESS_TIMEOUT_S = 60


def tf_config(cluster_spec, task_type="worker", index=0) -> dict[str, str]:
    return {"TF_CONFIG": json.dumps({"cluster": cluster_spec, "task": {"type": task_type, "index": index}})}


TWO_WORKERS = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}


# ---- importing distlib stays TensorFlow-free -------------------------------------------------------------


# ---- TF_CONFIG -------------------------------------------------------------------------------------------


def test_task_without_tf_config_is_a_single_local_chief():
    info = cluster.task({})
    assert (info.type, info.index, info.num_workers, info.is_chief, info.in_cluster) == ("worker", 0, 1, True, False)


def test_task_reads_worker_index_and_chief():
    first = cluster.task(tf_config(TWO_WORKERS, index=0))
    second = cluster.task(tf_config(TWO_WORKERS, index=1))
    assert first.is_chief and not second.is_chief
    assert (second.type, second.index, second.num_workers, second.worker_id) == ("worker", 1, 2, 1)


def test_explicit_chief_job_is_the_chief_and_counts_as_a_worker():
    spec = {"chief": ["h:1"], "worker": ["h:2", "h:3"]}
    assert cluster.task(tf_config(spec, "chief", 0)).is_chief
    worker0 = cluster.task(tf_config(spec, "worker", 0))
    assert not worker0.is_chief and worker0.num_workers == 3 and worker0.worker_id == 1


@pytest.mark.parametrize(
    "text, expected",
    [
        ("{not json", "not valid JSON"),
        ("[]", "JSON object"),
        (json.dumps({"task": {"type": "worker", "index": 0}}), "no 'cluster'"),
        (json.dumps({"cluster": TWO_WORKERS}), "no 'task'"),
        (json.dumps({"cluster": {"worker": "h:1"}, "task": {"type": "worker", "index": 0}}), "non-empty list"),
        (json.dumps({"cluster": {"worker": ["h1"]}, "task": {"type": "worker", "index": 0}}), "'host:port'"),
        (json.dumps({"cluster": {"worker": ["h:99999"]}, "task": {"type": "worker", "index": 0}}), "port"),
        (json.dumps({"cluster": {"worker": ["h:1", "h:1"]}, "task": {"type": "worker", "index": 0}}), "its own port"),
        (json.dumps({"cluster": {"wrker": ["h:1"]}, "task": {"type": "wrker", "index": 0}}), "unknown job"),
        (json.dumps({"cluster": TWO_WORKERS, "task": {"type": "chief", "index": 0}}), "not a job"),
        (json.dumps({"cluster": TWO_WORKERS, "task": {"type": "worker", "index": 2}}), "out of range"),
        (json.dumps({"cluster": TWO_WORKERS, "task": {"type": "worker", "index": "x"}}), "not an integer"),
        (json.dumps({"cluster": {"ps": ["h:1"]}, "task": {"type": "ps", "index": 0}}), "neither a 'worker'"),
    ],
)
def test_broken_tf_config_says_what_is_wrong(text, expected):
    with pytest.raises(cluster.TFConfigError, match=expected):
        cluster.task({"TF_CONFIG": text})


# ---- write_dir -------------------------------------------------------------------------------------------


def test_write_dir_gives_the_chief_the_real_dir_and_others_a_private_one(tmp_path):
    chief = cluster.task(tf_config(TWO_WORKERS, index=0))
    other = cluster.task(tf_config(TWO_WORKERS, index=1))
    target = tmp_path / "model"
    with dirs.write_dir(target, chief) as real:
        assert real.path == str(target) and not real.is_private
        (target / "saved").write_text("chief")
    assert (target / "saved").exists()  # kept
    with dirs.write_dir(target, other) as private:
        assert private.is_private and not private.path.startswith(str(tmp_path))
        open(private.join("saved"), "w").write("worker 1")
        private_path = private.path
        assert os.path.exists(private_path)
    assert not os.path.exists(private_path)  # removed afterwards
    assert (target / "saved").read_text() == "chief"


# ---- collectives (mocked GPU counts: no GPU on these machines) ------------------------------------------


def test_auto_picks_nccl_with_gpus_and_ring_without():
    """Mocked counts: the decision strategy() hands to CommunicationOptions."""
    assert collectives.choose_implementation("auto", 2) == "NCCL"
    assert collectives.choose_implementation("auto", 0) == "RING"
    assert collectives.choose_implementation("RING", 4) == "RING"
    assert collectives.choose_implementation("nccl", 1) == "NCCL"


def test_nccl_without_gpus_and_unknown_names_are_clear_errors():
    with pytest.raises(ValueError, match="needs GPUs"):
        collectives.choose_implementation("nccl", 0)
    with pytest.raises(ValueError, match="auto, ring, nccl"):
        collectives.choose_implementation("gloo", 0)


def test_unequal_gpu_counts_are_an_error_naming_each_worker():
    """Mocked counts, as the launcher would hand them in NBWORKERS_GPU_COUNTS."""
    collectives.check_equal_gpu_counts([2, 2], "test")
    with pytest.raises(collectives.GpuCountMismatchError, match="worker 0: 2, worker 1: 1"):
        collectives.check_equal_gpu_counts([2, 1], "test")
    assert collectives.gpu_counts_from_env({collectives.ENV_GPU_COUNTS: "1,2"}) == [1, 2]
    assert collectives.gpu_counts_from_env({}) is None
    with pytest.raises(ValueError, match="comma-separated"):
        collectives.gpu_counts_from_env({collectives.ENV_GPU_COUNTS: "one,two"})


def test_worker_facts_compare_gpu_devices_and_clusters():
    """Mocked facts, as workers publish them through the coordination service."""
    same = {"devices": 2, "device_type": "GPU", "cluster": "abc"}
    collectives.check_worker_facts([same, dict(same)])
    collectives.check_worker_facts([{"devices": 1, "device_type": "CPU", "cluster": "abc"}] * 2)
    with pytest.raises(collectives.GpuCountMismatchError, match="worker 0: 2, worker 1: 1"):
        collectives.check_worker_facts([same, {**same, "devices": 1}])
    with pytest.raises(collectives.GpuCountMismatchError, match="worker 0: 2, worker 1: 0"):
        collectives.check_worker_facts([same, {**same, "device_type": "CPU"}])
    with pytest.raises(cluster.TFConfigError, match="different TF_CONFIG"):
        collectives.check_worker_facts([same, {**same, "cluster": "xyz"}])


# ---- reporting ---------------------------------------------------------------------------------------------


@pytest.fixture
def relay():
    key = wire.new_key()
    receiver = RelayReceiver(key)
    sender = wire.Sender(receiver.address, key, worker=1)
    yield receiver, sender
    sender.close(linger_ms=0)
    receiver.close()


def drain(receiver, expected: int, timeout_s: float = 5.0):
    messages = []
    deadline = time.monotonic() + timeout_s
    while len(messages) < expected and time.monotonic() < deadline:
        messages.extend(receiver.poll(0.1))
    return messages


def test_report_is_throttled_keeps_the_latest_and_tags_the_worker(relay):
    receiver, sender = relay
    reporter = reporting.Reporter(sender, interval_s=3600)
    assert reporter.report({"metrics": {"loss": 1.0}, "step": 1, "epoch": 1})  # first goes out
    for step in range(2, 1000):
        assert not reporter.report({"metrics": {"loss": 1.0 / step}, "step": step, "epoch": 1})
    assert reporter.flush()  # the latest throttled values
    messages = drain(receiver, 2)
    assert [m.content["step"] for m in messages] == [1, 999]
    assert all(m.kind == "metrics" and m.content["worker"] == 1 for m in messages)
    assert messages[1].content["metrics"]["loss"] == pytest.approx(1 / 999)


def test_report_outside_worker_does_nothing():
    assert reporting.Reporter(None, 0).report({"metrics": {"loss": 1.0}}) is False


def test_report_callback_speaks_both_keras_protocols(relay, monkeypatch):
    receiver, sender = relay
    monkeypatch.setattr(reporting, "_reporter", reporting.Reporter(sender, interval_s=0))
    monkeypatch.setattr(reporting, "_reporter_pid", os.getpid())
    callback = reporting.ReportCallback()
    callback.set_params({"epochs": 2, "steps": 3})
    callback.set_model(object())
    assert callback._implements_train_batch_hooks() and not callback._implements_test_batch_hooks()
    callback.on_train_begin()
    callback.on_epoch_begin(0)
    callback.on_train_batch_begin(0)
    callback.on_train_batch_end(0, {"loss": 0.5, "accuracy": 0.25, "step": 7})
    callback.on_epoch_end(0, {"loss": 0.4, "accuracy": 0.5})
    callback.on_train_end()
    messages = drain(receiver, 2)
    assert [(m.content["epoch"], m.content["step"]) for m in messages] == [(1, 1), (1, 3)]
    assert messages[0].content["metrics"] == {"loss": 0.5, "accuracy": 0.25, "step": 7}
    assert messages[1].content["epochs_total"] == 2 and messages[1].content["steps_total"] == 3


# ---- import hook and Keras helpers ----------------------------------------------------------------------


def test_when_imported_runs_after_the_module_and_at_once_if_loaded(tmp_path, monkeypatch):
    (tmp_path / "nbw_hook_probe.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    import_hooks.when_imported("nbw_hook_probe", lambda module: seen.append(module.VALUE))
    assert seen == []
    import nbw_hook_probe  # noqa: F401

    assert seen == [42]
    import_hooks.when_imported("nbw_hook_probe", lambda module: seen.append("again"))
    assert seen == [42, "again"]
    sys.modules.pop("nbw_hook_probe", None)


def test_use_tf_keras_sets_the_env_or_says_it_is_too_late(monkeypatch):
    # setenv first so monkeypatch records the original (absent) value and use_tf_keras's write is undone:
    # delenv of an absent variable records nothing, and the "1" would leak into every later test's kernel.
    monkeypatch.setenv(fit_guard.ENV_LEGACY_KERAS, "")
    monkeypatch.delenv(fit_guard.ENV_LEGACY_KERAS)
    monkeypatch.setitem(sys.modules, "tensorflow", types.ModuleType("tensorflow"))
    with pytest.raises(fit_guard.TfKerasTooLateError, match="TF_USE_LEGACY_KERAS=1"):
        fit_guard.use_tf_keras()
    monkeypatch.delitem(sys.modules, "tensorflow")
    fit_guard.use_tf_keras()
    assert os.environ[fit_guard.ENV_LEGACY_KERAS] == "1"


def test_fit_error_message_names_both_fixes():
    message = fit_guard.FIT_UNDER_MWMS_MESSAGE
    assert "distlib.fit(" in message and "TF_USE_LEGACY_KERAS=1" in message and "20585" in message


# ---- which cells get early collectives -------------------------------------------------------------------


def test_early_collectives_only_for_cells_that_use_a_multi_worker_strategy(tmp_path):
    from nbworkers.distlib.worker.mwms import collective_startup

    info = cluster.task(tf_config(TWO_WORKERS))
    cell = tmp_path / "cell.py"
    env = {wire.ENV_CODE: str(cell), wire.ENV_CWD: str(tmp_path)}
    cell.write_text("import tensorflow as tf\nprint(tf.reduce_sum([1, 2]))\n")
    assert not collective_startup.wanted(info, env)  # plain TensorFlow: stays local
    (tmp_path / "mnist_setup.py").write_text("strategy = tf.distribute.MultiWorkerMirroredStrategy()\n")
    assert collective_startup.wanted(info, env)  # a %%writefile module next to the cell uses MWMS
    (tmp_path / "mnist_setup.py").unlink()
    assert collective_startup.wanted(info, {**env, collective_startup.ENV_EARLY_COLLECTIVES: "1"})
    cell.write_text("from nbworkers import distlib\nstrategy = distlib.strategy()\n")
    assert collective_startup.wanted(info, env)
    assert not collective_startup.wanted(info, {**env, collective_startup.ENV_EARLY_COLLECTIVES: "0"})
    assert not collective_startup.wanted(cluster.task({}), env)  # no cluster
    ps_cluster = cluster.task(tf_config({"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]}, "worker", 0))
    assert not collective_startup.wanted(ps_cluster, env)  # parameter-server clusters are left alone


# ---- waiting for the coordination leader -----------------------------------------------------------------


def _info(task_type: str, index: int, jobs: dict) -> cluster.TaskInfo:
    return cluster.parse_tf_config(json.dumps({"cluster": jobs, "task": {"type": task_type, "index": index}}))


def test_only_non_leader_training_tasks_wait_for_the_leader():
    workers = {"worker": ["a:1", "b:2", "c:3"]}
    assert leader_wait.leader_address(_info("worker", 0, workers)) is None  # the leader itself
    assert leader_wait.leader_address(_info("worker", 2, workers)) == "a:1"
    with_chief = {"chief": ["c:9"], "worker": ["a:1"], "evaluator": ["e:5"]}
    assert leader_wait.leader_address(_info("worker", 0, with_chief)) == "c:9"
    assert leader_wait.leader_address(_info("chief", 0, with_chief)) is None
    assert leader_wait.leader_address(_info("evaluator", 0, with_chief)) is None
    assert leader_wait.leader_address(_info("worker", 1, {"chief": ["c:9"], "worker": ["a:1", "b:2"], "ps": ["p:3"]})) is None
    assert leader_wait.leader_address(cluster.task({})) is None


def test_waiting_for_the_leader_returns_when_it_listens_and_gives_up_after_the_wait(monkeypatch):
    import socket
    import threading

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nobody listens on the port now
    info = _info("worker", 1, {"worker": [f"127.0.0.1:{port}", "127.0.0.1:1"]})

    monkeypatch.setattr(leader_wait, "_waited", False)
    started = time.monotonic()
    assert leader_wait.wait_for_leader(info, timeout_s=0.3) is False  # TensorFlow's own connect takes over
    assert time.monotonic() - started >= 0.3  # it did wait the whole time

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening = threading.Timer(0.3, lambda: (server.bind(("127.0.0.1", port)), server.listen()))
    listening.start()
    try:
        assert leader_wait.wait_for_leader(info, timeout_s=30) is True
        assert leader_wait.wait_for_leader(info, timeout_s=0) is True  # once per process
    finally:
        listening.join()
        server.close()
