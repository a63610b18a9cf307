"""The ``%%worker`` cells several test files run, in one place: a small Keras training under
MultiWorkerMirroredStrategy on generated data, and the sleeping / killable cells the lifecycle tests use.

    from cells import KERAS_TRAINING, CHECKSUM, worker_cell
    CELL = worker_cell("-n 2 --block --name {name} --env TF_USE_LEGACY_KERAS=1", KERAS_TRAINING, FIT, CHECKSUM)

Cells are ``str.format`` templates where a test fills ``{name}`` and its flags: the code below has no braces.
"""

from __future__ import annotations

IMPORTS = """\
import os
import numpy as np
import tensorflow as tf
"""

# A two-layer model on 256 generated examples per worker (different data on each worker), built and compiled
# under MultiWorkerMirroredStrategy, and a repeating dataset of batches of 32. Run with
# `--env TF_USE_LEGACY_KERAS=1` for tf_keras (Keras 2) or without for Keras 3 (distlib's fix applies).
KERAS_MODEL = """\
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.RandomState(int(os.environ["NBWORKERS_WORKER"]))  # different data on each worker
x = rng.rand(256, 8).astype("float32")
y = (x.sum(axis=1) > 4).astype("float32")
with strategy.scope():
    tf.keras.utils.set_random_seed(1)
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer=tf.keras.optimizers.SGD(0.1))
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
"""
KERAS_TRAINING = IMPORTS + KERAS_MODEL

FIT = "history = model.fit(dataset, epochs=2, steps_per_epoch=4, verbose=2)\n"

# The trained weights' fingerprint: equal on every worker when they trained in sync (tests compare them).
CHECKSUM = 'print("CHECKSUM", repr(float(sum(np.abs(w).astype("float64").sum() for w in model.get_weights()))))\n'

# The custom-loop tutorial's model, data and distributed train step (needs GLOBAL_BATCH and the imports of
# numpy, tensorflow, keras and distlib): 512 generated examples, a 8-16-2 model, SGD, one all-reduced step.
CUSTOM_LOOP_STEP = '''\
def examples():
    rng = np.random.RandomState(0)
    features = rng.rand(512, 8).astype("float32")
    return tf.data.Dataset.from_tensor_slices((features, (features.sum(axis=1) > 4).astype("int64")))


strategy = distlib.strategy()
with strategy.scope():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(0.05)
dataset = distlib.distributed_dataset(strategy, examples, GLOBAL_BATCH, shuffle_buffer=64, seed=1)
loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            loss = distlib.scale_loss(loss_object(y, model(x, training=True)), GLOBAL_BATCH)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss
    return strategy.reduce("SUM", strategy.run(step_fn, args=(next(iterator),)), axis=None)
'''

# A worker that says it is up and then sleeps until it is stopped.
SLEEP = """\
import time
print("worker up", flush=True)
time.sleep(600)
"""

# Generation 0 waits to be killed (or stopped); a restarted generation finishes at once.
KILLABLE = """\
import os, time
print("generation", os.environ["NBWORKERS_GENERATION"], "pid", os.getpid(), flush=True)
if os.environ["NBWORKERS_GENERATION"] == "0":
    time.sleep(600)
print("done", flush=True)
"""

# A loop that runs until it is stopped, writing "<marker>-finally-<worker>" in its finally block and
# "<marker>-atexit-<worker>" from an atexit function; {setup} is one line run first, {body} one run at each step.
LOOP_WITH_FINALLY = """\
import atexit, os, time
from nbworkers import distlib
{setup}
marker = {marker!r}
me = os.environ["NBWORKERS_WORKER"]
atexit.register(lambda: open(f"{{marker}}-atexit-{{me}}", "w").write("atexit ran"))
step = 0
try:
    print("worker up", flush=True)
    while True:
        step += 1
        {body}
        time.sleep(0.01)
finally:
    open(f"{{marker}}-finally-{{me}}", "w").write(f"finally ran at step {{step}}")
"""


def worker_cell(flags: str, *parts: str) -> str:
    """``%%worker <flags>`` and the code ``parts``, joined."""
    return f"%%worker {flags}\n" + "".join(parts)
