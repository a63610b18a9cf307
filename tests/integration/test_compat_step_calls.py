"""Where a session's Stop may pause the workers without report() (distlib/compat/step_calls.py), in real TensorFlow:
before each call of a traced distributed step (a custom loop's, Keras' fit), each eager strategy.run/reduce, and each
Estimator training step (TensorFlow 2.15); never at a tf.function with no strategy step in it. The point raises
KeyboardInterrupt every third (or sixth) time here, as a Stop does: the steps before it are whole, the next one never began.
One process per TensorFlow (the custom loop's and Keras fit's checks share one), no cluster (a one-device
MirroredStrategy runs the same calls)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest
from distlib_helpers import TF215_PYTHON

HEAD = """
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
from nbworkers.distlib.compat import step_calls
points = []

def on_step():
    points.append(1)
    if len(points) % LIMIT == 0:
        raise KeyboardInterrupt

step_calls.install(on_step)
import tensorflow as tf
"""
ON_THIRD = "LIMIT = 3\n"
CUSTOM_LOOP = ON_THIRD + HEAD + """
strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
with strategy.scope():
    w = tf.Variable(0.0)

@tf.function
def step():
    return strategy.reduce("SUM", strategy.run(lambda: w.assign_add(1.0)), axis=None)

@tf.function
def plain():
    return w * 2.0

done = 0
try:
    for _ in range(10):
        plain()  # no strategy step in it: never a point
        step()
        done += 1
except KeyboardInterrupt:
    pass
eager = len(points)
try:
    for _ in range(5):
        strategy.run(lambda: w.assign_add(1.0))
except KeyboardInterrupt:
    pass
print("CUSTOM", done, int(w.numpy()), eager, len(points))
"""
# Run after CUSTOM_LOOP, in its process (one TensorFlow import for both): the points counted anew.
KERAS_FIT = """
LIMIT = 6
points.clear()
import numpy as np
import keras
strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
x, y = np.ones((64, 4), "float32"), np.ones((64, 1), "float32")
batches = []
count = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: batches.append(batch))
try:
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[count])
except KeyboardInterrupt:
    pass
steps = int(model.optimizer.iterations.numpy())
print("FIT", "stopped between steps" if 0 < steps == len(batches) < 8 else "not so", steps, len(batches))
"""
ESTIMATOR = ON_THIRD + HEAD + """
import tempfile
ran = []

class Count(tf.estimator.SessionRunHook):
    def after_run(self, run_context, run_values):
        ran.append(1)

def input_fn():
    return tf.data.Dataset.from_tensors(({"x": [[1.0]]}, [[1.0]])).repeat()

def model_fn(features, labels, mode):
    prediction = tf.compat.v1.layers.dense(features["x"], 1)
    loss = tf.reduce_mean(tf.square(prediction - labels))
    step = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, tf.compat.v1.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=step)

estimator = tf.estimator.Estimator(model_fn, model_dir=tempfile.mkdtemp())
try:
    estimator.train(input_fn, hooks=[Count()], steps=10)
except KeyboardInterrupt:
    pass
print("ESTIMATOR", len(ran), len(points))
"""


def run(python: str, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBWORKERS_", "TF_CONFIG"))}
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@functools.cache
def custom_loop_then_keras_fit() -> str:
    """The two checks on this venv in one process: a TensorFlow import costs ~4 s of CPU (`make test` is CPU-bound)."""
    return run(sys.executable, CUSTOM_LOOP + KERAS_FIT)


def test_a_custom_loops_step_calls_and_eager_strategy_calls_are_points_and_other_functions_are_not():
    # the first call traces (then it is known to be a step): points before calls 2, 3 and 4; the third raises before
    # call 4, so 3 steps ran whole; then eager strategy.run: a point before each call, the sixth raises before the third
    assert "CUSTOM 3 5 3 6" in custom_loop_then_keras_fit()


def test_keras_fit_pauses_before_its_train_function_calls():
    # (eager reads of its metrics' sync-on-read variables are strategy.reduce calls too: collectives under
    # MultiWorkerMirroredStrategy, on every worker alike) the stop lands between two whole training steps
    assert "FIT stopped between steps" in custom_loop_then_keras_fit()


@pytest.mark.estimator
@pytest.mark.skipif(not TF215_PYTHON.exists(), reason=f"needs {TF215_PYTHON}: run `make estimator-env`")
def test_an_estimators_training_steps_are_points():
    # the points come before steps 1, 2 and 3: the third raises, so two steps ran
    assert "ESTIMATOR 2 3" in run(str(TF215_PYTHON), ESTIMATOR)
