"""The Estimator tutorial's train_and_evaluate with MultiWorkerMirroredStrategy on 2 workers, in the
TensorFlow 2.15 environment (``make estimator-env`` builds .venv-tf215; tf.estimator is gone from 2.16 on).
A second run with a higher max_steps continues from the checkpoint the first left in model_dir.
"""

from __future__ import annotations

import pytest
from distlib_helpers import TF215_PYTHON, run_cluster  # noqa: E402

pytestmark = [
    pytest.mark.estimator,
    pytest.mark.skipif(
        not TF215_PYTHON.exists(),
        reason=f"needs the TensorFlow 2.15 environment at {TF215_PYTHON}: run `make estimator-env`",
    ),
]

ESTIMATOR_CELL = """
import json, os
import tensorflow as tf
from nbworkers import distlib

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
        return tf.estimator.EstimatorSpec(mode, predictions={"logits": logits})
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf.keras.losses.Reduction.NONE)(labels, logits)
    loss = tf.reduce_sum(loss) * (1.0 / BATCH_SIZE)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss)
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(learning_rate=0.05)
    train_op = optimizer.minimize(loss, tf.compat.v1.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)


start = tf.train.latest_checkpoint(MODEL_DIR)
print("RESULT", json.dumps({"tf": tf.__version__, "start_checkpoint": start}), flush=True)
config = distlib.run_config(model_dir=MODEL_DIR, save_checkpoints_steps=5)
classifier = tf.estimator.Estimator(model_fn=model_fn, config=config)
tf.estimator.train_and_evaluate(
    classifier,
    train_spec=tf.estimator.TrainSpec(input_fn=input_fn, max_steps=int(os.environ["MAX_STEPS"]), hooks=[distlib.ReportHook()]),
    eval_spec=tf.estimator.EvalSpec(input_fn=input_fn, steps=2),
)
print("RESULT", json.dumps({"final_step": int(classifier.get_variable_value("global_step"))}), flush=True)
"""


def test_estimator_train_and_evaluate_on_two_workers_and_restart_continues(tmp_path):
    first = run_cluster(ESTIMATOR_CELL, tmp_path, python=TF215_PYTHON, env={"MAX_STEPS": "10"})
    assert first.returncodes == [0, 0], first.describe()
    assert not first.startup_warnings()
    for worker in (0, 1):
        result = first.result(worker)
        assert result["tf"].startswith("2.15") and result["start_checkpoint"] is None
        assert result["final_step"] == 10
        steps = [m["step"] for m in first.metrics(worker)]
        assert steps and all("loss" in m["metrics"] for m in first.metrics(worker)), first.describe()
    assert (tmp_path / "estimator_model" / "checkpoint").exists()

    second = run_cluster(ESTIMATOR_CELL, tmp_path, python=TF215_PYTHON, env={"MAX_STEPS": "20"})
    assert second.returncodes == [0, 0], second.describe()
    # each worker reads global_step from model_dir's latest checkpoint, which only the chief (worker 0) writes, every
    # 5 steps and at the end: worker 1 may read it before the chief's last save (CI, 2026-11-28: 15), never before
    # step 15's (the chief saved it before the collectives of steps 16-20, which worker 1 took part in)
    latest = (tmp_path / "estimator_model" / "checkpoint").read_text().splitlines()[0]  # model_checkpoint_path: "..."
    assert latest.endswith('model.ckpt-20"'), latest
    for worker, final_steps in ((0, {20}), (1, {15, 20})):
        result = second.result(worker)
        assert result["start_checkpoint"].endswith("model.ckpt-10")  # the first run's last checkpoint
        assert result["final_step"] in final_steps, (worker, result)
        steps = [m["step"] for m in second.metrics(worker)]
        assert steps and min(steps) >= 10, steps  # continued from step 10, not from zero


KERAS2_CELL = """
import json
import numpy as np
from nbworkers import distlib
import tensorflow as tf

features = np.random.RandomState(0).rand(512, 8).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((features, (features.sum(axis=1) > 4).astype("int64"))).repeat().batch(64)
strategy = distlib.strategy()  # after the dataset, as in the tutorial
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
history = distlib.fit(model, dataset, epochs=2, steps_per_epoch=4)  # Keras 2: handed to model.fit
print("RESULT", json.dumps({"loss": history.history["loss"]}))
"""


def test_distlib_keras_helpers_work_on_tensorflow_215(tmp_path):
    run = run_cluster(KERAS2_CELL, tmp_path, python=TF215_PYTHON)
    assert run.returncodes == [0, 0], run.describe()
    for worker in (0, 1):
        assert len(run.result(worker)["loss"]) == 2
        assert run.metrics(worker) and run.metrics(worker)[-1]["epoch"] == 2, run.describe()
