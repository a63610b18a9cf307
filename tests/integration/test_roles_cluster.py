"""Cluster roles end to end: a real kernel launching real TensorFlow processes with --chief, --ps
and --evaluator. CPU, tiny models, generated data."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
from conftest import processes_of_run_root, wait_until
from distlib_helpers import TF215_PYTHON  # noqa: E402

pytestmark = pytest.mark.share_kernel  # one kernel for these tests (tests/shared_kernel.py)

# TensorFlow's parameter-server tutorial, "Training with Model.fit": the cell runs on the chief (the
# coordinator); the workers and the parameter server are TensorFlow servers nbworkers starts. Keras 3's
# model.fit does not support ParameterServerStrategy ("To use this dataset, you need to pass this dataset to
# ClusterCoordinator.create_per_worker_dataset"), tf_keras's does: TF_USE_LEGACY_KERAS=1.
PSS_CELL = """%%worker -n 2 --ps 1 --block --name pss --env TF_USE_LEGACY_KERAS=1
import json
import numpy as np
import tensorflow as tf
from nbworkers import distlib

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)
x = np.random.RandomState(0).rand(256, 8).astype("float32")
y = (x.sum(axis=1) > 4).astype("float32")

def dataset_fn(input_context):
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).repeat().batch(32)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer=tf.keras.optimizers.SGD(0.1), steps_per_execution=2)
history = model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=2, steps_per_epoch=4,
                    callbacks=[distlib.ReportCallback()], verbose=2)
print("RESULT", json.dumps({"task": cluster_resolver.task_type, "loss": history.history["loss"],
                            "variable_device": model.weights[0].device}), flush=True)
"""

# Keras 3 on the same cluster: its model.fit gets nbworkers' clear error; a ClusterCoordinator loop trains.
KERAS3_PSS_CELL = """%%worker -n 1 --ps 1 --block --name pss-keras3
import json
import tensorflow as tf
import keras
from nbworkers import distlib

strategy = distlib.strategy()  # ParameterServerStrategy on the coordinator
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer=keras.optimizers.SGD(0.05))
    optimizer = keras.optimizers.SGD(0.05)
    optimizer.build(model.trainable_variables)

def dataset_fn():
    x = tf.random.stateless_uniform((64, 4), seed=(1, 2))
    return tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, axis=1, keepdims=True))).repeat().batch(16)

try:
    model.fit(dataset_fn(), epochs=1, steps_per_epoch=2, verbose=0)
    fit_error = None
except Exception as error:
    fit_error = f"{type(error).__name__}: {error}"

per_worker_dataset = coordinator.create_per_worker_dataset(dataset_fn)
per_worker_iterator = iter(per_worker_dataset)

@tf.function
def train_step(iterator):
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    return strategy.run(step, args=next(iterator))

losses = [coordinator.schedule(train_step, args=(per_worker_iterator,)) for _ in range(6)]
coordinator.join()
distlib.report(step=6, loss=float(losses[-1].fetch()), flush=True)
print("RESULT", json.dumps({"fit_error": fit_error, "losses": [float(l.fetch()) for l in losses]}), flush=True)
"""

STOP_CELL = """%%worker -n 1 --ps 1 --name {name} --max-restarts 0
import time
import tensorflow as tf
strategy = tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())
with strategy.scope():
    v = tf.Variable(1.0)
print("coordinator connected, variable on", v.device, flush=True)
time.sleep(600)
"""

# MultiWorkerMirroredStrategy with a separate chief: the chief writes the checkpoints, worker 0 does not.
CHIEF_CELL = """%%worker -n 1 --chief --block --name chiefrun
import json, os
import numpy as np
import tensorflow as tf
import keras
from nbworkers import distlib

info = distlib.task()
strategy = distlib.strategy()
x = np.random.RandomState(0).rand(64, 4).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer=keras.optimizers.SGD(0.05))
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
checkpoint_dir = os.path.join(os.getcwd(), "checkpoints")
distlib.fit(model, dataset, epochs=2, steps_per_epoch=2, checkpoint_dir=checkpoint_dir, verbose=0)
final = distlib.TrainingCheckpoint(os.path.join(os.getcwd(), "final"), model=model)
saved = final.save()  # every task takes part; only the chief's copy is kept
print("RESULT", json.dumps({"type": info.type, "is_chief": info.is_chief, "saved": saved,
                            "tf_should_checkpoint": bool(strategy.extended.should_checkpoint),
                            "private_dir": final._target.path}), flush=True)
"""


def results(log_text: str) -> list[dict]:
    return [json.loads(m) for m in re.findall(r"^RESULT (\{.*\})$", log_text, flags=re.M)]


def log(run_root: Path, name: str, index: int) -> str:
    return (run_root / name / f"worker-{index}.log").read_text()


def test_parameter_server_strategy_fit_runs_on_the_coordinator_and_servers_are_stopped(kernel, run_root):
    result = kernel.run(PSS_CELL)
    assert not result.error, result.error
    snap = kernel.value("nbworkers.get_cluster('pss').snapshot()")
    logs = [log(run_root, "pss", i) for i in range(4)]
    assert snap["status"] == "finished", (snap["error"], logs)
    assert [(w["role"], w["role_index"]) for w in snap["workers"]] == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
    assert all(w["status"] == "finished" for w in snap["workers"]), [(w["status"], w["detail"]) for w in snap["workers"]]
    chief = results(logs[0])
    assert len(chief) == 1 and chief[0]["task"] == "chief" and len(chief[0]["loss"]) == 2, logs[0]
    assert "/job:ps/" in chief[0]["variable_device"], "the model's variables live on the parameter server"
    assert snap["workers"][0]["metrics"].get("loss") is not None, "the coordinator's metrics reached the kernel"
    for i, role in ((1, "worker 0"), (2, "worker 1"), (3, "ps 0")):
        assert f"nbworkers: {role} serves at" in logs[i] and not results(logs[i]), "servers do not run the cell"
        assert snap["workers"][i]["detail"] == "server stopped: the coordinator finished"
    assert not processes_of_run_root(run_root), "a TensorFlow server outlived the run"
    listing = kernel.run("%workers").displays[-1]["text/plain"]
    assert "0 chief:finished" in listing and "3 ps0:finished" in listing


def test_keras3_under_parameter_servers_gets_a_clear_fit_error_and_trains_with_a_coordinator_loop(kernel, run_root):
    result = kernel.run(KERAS3_PSS_CELL)
    assert not result.error, result.error
    snap = kernel.value("nbworkers.get_cluster('pss-keras3').snapshot()")
    chief_log = log(run_root, "pss-keras3", 0)
    assert snap["status"] == "finished", (snap["error"], chief_log[-3000:])
    found = results(chief_log)
    assert len(found) == 1 and len(found[0]["losses"]) == 6, chief_log[-3000:]
    assert found[0]["fit_error"].startswith("KerasFitUnderParameterServerError")
    assert "TF_USE_LEGACY_KERAS=1" in found[0]["fit_error"] and "ClusterCoordinator" in found[0]["fit_error"]
    assert snap["workers"][0]["metrics"]["loss"] == pytest.approx(found[0]["losses"][-1])
    assert not processes_of_run_root(run_root)


def test_stopping_a_parameter_server_run_leaves_no_server_behind(kernel, run_root):
    assert not kernel.run(STOP_CELL.format(name="pss-stop")).error
    assert wait_until(lambda: "coordinator connected" in kernel.run("%workers logs pss-stop -w 0").stdout, 180), \
        kernel.run("%workers logs pss-stop").stdout
    snap = kernel.value("nbworkers.get_cluster('pss-stop').snapshot()")
    assert [w["role"] for w in snap["workers"]] == ["chief", "worker", "ps"]
    assert all(w["status"] == "running" for w in snap["workers"]), [w["status"] for w in snap["workers"]]
    assert "TensorFlow server" in snap["workers"][2]["detail"]
    stopped = kernel.run("%workers stop pss-stop")
    assert not stopped.error, stopped.error
    assert kernel.value("nbworkers.get_cluster('pss-stop').status") == "stopped"
    assert wait_until(lambda: not processes_of_run_root(run_root), 10), "a TensorFlow server outlived the stop"


def test_a_parameter_server_that_dies_fails_the_run_and_takes_the_others_down(kernel, run_root):
    assert not kernel.run(STOP_CELL.format(name="pss-crash")).error
    assert wait_until(lambda: "coordinator connected" in kernel.run("%workers logs pss-crash -w 0").stdout, 180)
    ps_pid = kernel.value("nbworkers.get_cluster('pss-crash').snapshot()['workers'][2]['pid']")
    os.kill(ps_pid, signal.SIGKILL)
    waited = kernel.run("%workers wait pss-crash --timeout 60")  # a failed run fails the waiting cell (headless runs exit non-zero)
    assert waited.status == "error" and waited.error.startswith("RunFailed: run 'pss-crash' failed: "), waited.text
    assert "worker 2 was killed by SIGKILL" in waited.error and "no restarts left" in waited.error, waited.error
    snap = kernel.value("nbworkers.get_cluster('pss-crash').snapshot()")
    assert snap["status"] == "failed" and "worker 2 was killed by SIGKILL" in snap["error"], snap["error"]
    assert snap["workers"][2]["status"] == "failed" and snap["workers"][0]["status"] == "stopped"
    assert wait_until(lambda: not processes_of_run_root(run_root), 10), "a TensorFlow server outlived the failure"


def test_chief_writes_the_checkpoints_under_multi_worker_mirrored_strategy(kernel, run_root):
    before = {p.name for p in kernel.notebook_dir.iterdir()}  # what the shared kernel's earlier tests left there
    result = kernel.run(CHIEF_CELL)
    assert not result.error, result.error
    snap = kernel.value("nbworkers.get_cluster('chiefrun').snapshot()")
    logs = [log(run_root, "chiefrun", i) for i in range(2)]
    assert snap["status"] == "finished", (snap["error"], logs)
    chief, worker = (results(text)[0] for text in logs)
    assert (chief["type"], chief["is_chief"], chief["tf_should_checkpoint"]) == ("chief", True, True)
    assert (worker["type"], worker["is_chief"], worker["tf_should_checkpoint"]) == ("worker", False, False)
    final_dir = kernel.notebook_dir / "final"
    assert chief["saved"] and Path(chief["saved"]).parent == final_dir
    assert worker["saved"] is None and not Path(worker["private_dir"]).exists(), "worker 0 kept no checkpoint"
    assert (kernel.notebook_dir / "checkpoints" / "checkpoint").exists()
    assert sorted({p.name for p in kernel.notebook_dir.iterdir()} - before) == ["checkpoints", "final"]
    assert "0 chief:finished, 1 worker0:finished" in kernel.run("%workers").displays[-1]["text/plain"]


# The Estimator tutorial (train_and_evaluate under MultiWorkerMirroredStrategy) with an evaluator task, in the
# TensorFlow 2.15 environment: the evaluator evaluates the checkpoints the workers write.
ESTIMATOR_CELL = """%%worker -n 2 --evaluator --block --name est --python {python}
import os
import tensorflow as tf

BATCH_SIZE = 16
MODEL_DIR = os.path.join(os.getcwd(), "estimator_model")

def input_fn(mode, input_context=None):
    features = tf.random.stateless_uniform((256, 8), seed=(1, 2))
    labels = tf.cast(tf.reduce_sum(features, axis=1) > 4, tf.int64)
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    if input_context:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return dataset.repeat().batch(BATCH_SIZE)

def model_fn(features, labels, mode):
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    logits = model(features, training=False)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={{"logits": logits}})
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf.keras.losses.Reduction.NONE)(labels, logits)
    loss = tf.reduce_sum(loss) * (1.0 / BATCH_SIZE)
    if mode == tf.estimator.ModeKeys.EVAL:
        accuracy = tf.compat.v1.metrics.accuracy(labels, tf.argmax(logits, axis=1))
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={{"accuracy": accuracy}})
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(learning_rate=0.05)
    train_op = optimizer.minimize(loss, tf.compat.v1.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)

strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
config = tf.estimator.RunConfig(train_distribute=strategy, model_dir=MODEL_DIR, save_checkpoints_steps=5)
classifier = tf.estimator.Estimator(model_fn=model_fn, config=config)
tf.estimator.train_and_evaluate(
    classifier,
    train_spec=tf.estimator.TrainSpec(input_fn=input_fn, max_steps=10),
    eval_spec=tf.estimator.EvalSpec(input_fn=input_fn, steps=2, start_delay_secs=0, throttle_secs=1),
)
print("DONE", os.environ["TF_CONFIG"], flush=True)
"""


@pytest.mark.estimator
@pytest.mark.installed  # `%%worker --python` from the wheel's kernel side into .venv-tf215, set up the README's way
@pytest.mark.skipif(not TF215_PYTHON.exists(),
                    reason=f"needs the TensorFlow 2.15 environment at {TF215_PYTHON}: run `make estimator-env`")
def test_estimator_train_and_evaluate_reports_the_evaluators_metrics(kernel, run_root):
    result = kernel.run(ESTIMATOR_CELL.format(python=TF215_PYTHON))
    assert not result.error, result.error
    snap = kernel.value("nbworkers.get_cluster('est').snapshot()")
    logs = [log(run_root, "est", i) for i in range(3)]
    assert snap["status"] == "finished", (snap["error"], logs[2][-3000:])
    evaluator = snap["workers"][2]
    assert (evaluator["role"], evaluator["status"]) == ("evaluator", "finished")
    assert {"loss", "accuracy"} <= set(evaluator["metrics"]), evaluator
    assert evaluator["step"] == 10, "the evaluator evaluated the last checkpoint"
    assert evaluator["history"], "each evaluation reached the kernel"
    tf_config = json.loads(re.search(r"^DONE (\{.*\})$", logs[2], flags=re.M).group(1))
    assert tf_config["task"] == {"type": "evaluator", "index": 0} and "evaluator" not in tf_config["cluster"]
    steps = [x for x, _ in evaluator["history"]]
    assert steps == sorted(steps) and evaluator["exit_code"] == 0, "it evaluated new checkpoints, then ended by itself"
    assert not any("accuracy" in w["metrics"] for w in snap["workers"][:2]), "the training workers do not evaluate"
    assert not processes_of_run_root(run_root)


EVALUATOR_FOREVER_CELL = """%%worker -n 1 --evaluator --block --name sidecar
import os, json, time
from nbworkers import distlib
info = distlib.task()
print("TASK", info.type, flush=True)
if info.is_evaluator:
    time.sleep(600)  # an evaluator that would watch for checkpoints forever
"""


def test_an_evaluator_that_never_exits_is_stopped_after_training_and_the_run_finishes(kernel, run_root):
    kernel.run("nbworkers.settings().evaluator_grace = 1.0")
    result = kernel.run(EVALUATOR_FOREVER_CELL)
    assert not result.error, result.error
    snap = kernel.value("nbworkers.get_cluster('sidecar').snapshot()")
    assert snap["status"] == "finished", snap["error"]
    worker, evaluator = snap["workers"]
    assert (worker["role"], worker["status"], worker["exit_code"]) == ("worker", "finished", 0)
    assert (evaluator["role"], evaluator["status"]) == ("evaluator", "finished")
    assert evaluator["exit_code"] != 0 and evaluator["detail"] == "stopped after training ended"
    assert "TASK evaluator" in log(run_root, "sidecar", 1)
    assert not processes_of_run_root(run_root)
