# Cost of reporting: one process trains a small tf_keras model, alternating model.fit calls with and without
# nbworkers' ReportCallback (same process, same traced train function, so only the callback differs), and
# prints one JSON line: steps per second of every "on" and "off" fit, measured from train begin to train end.
# A third mode, "hook", adds an empty per-step callback instead: what any per-step Keras callback costs.
# The relay (NBWORKERS_RELAY/KEY) points at a receiver the benchmark drains, as a kernel would.
import json
import sys
import time

import numpy as np
import tensorflow as tf

from nbworkers.distlib import reporting
from nbworkers.protocol import wire

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 600
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
WIDTH = int(sys.argv[3]) if len(sys.argv) > 3 else 128  # hidden units per layer
BATCH = int(sys.argv[4]) if len(sys.argv) > 4 else 32
LAYERS = int(sys.argv[5]) if len(sys.argv) > 5 else 1

assert wire.process_sender() is not None, "run with the relay in the environment"
rng = np.random.RandomState(0)
x = rng.rand(2048, 28, 28).astype("float32")
y = rng.randint(0, 10, size=2048).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat().prefetch(4)
model = tf.keras.Sequential(
    [tf.keras.layers.Flatten(input_shape=(28, 28))]
    + [tf.keras.layers.Dense(WIDTH, activation="relu") for _ in range(LAYERS)]
    + [tf.keras.layers.Dense(10)]
)
model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              optimizer=tf.keras.optimizers.SGD(0.01), metrics=["accuracy"])


class Clock(tf.keras.callbacks.Callback):
    """Times a whole fit from its train-begin to its train-end hook; it has no per-step hook of its own, so
    "off" is a fit without any per-step callback (the train function is traced before the measurements)."""

    def __init__(self):
        super().__init__()
        self.start = self.end = 0.0

    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()

    def on_train_end(self, logs=None):
        self.end = time.perf_counter()


class Hook(tf.keras.callbacks.Callback):
    _supports_tf_logs = True

    def on_train_batch_end(self, batch, logs=None):
        pass


class TimedReport(reporting.ReportCallback):
    """ReportCallback, timing its own hooks: what reporting itself costs, free of the machine's fit-to-fit noise
    (a send converts the logged tensors to floats inside these hooks, so that wait is counted too)."""

    own_s = 0.0

    def _timed(self, hook, *args):
        start = time.perf_counter()
        try:
            return hook(*args)
        finally:
            TimedReport.own_s += time.perf_counter() - start

    def on_epoch_begin(self, epoch, logs=None):
        return self._timed(super().on_epoch_begin, epoch, logs)

    def on_train_batch_end(self, batch, logs=None):
        return self._timed(super().on_train_batch_end, batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        return self._timed(super().on_epoch_end, epoch, logs)

    def on_train_end(self, logs=None):
        return self._timed(super().on_train_end, logs)


results = {"on": [], "off": [], "hook": []}
on_fit_s = 0.0
orders = (("on", "off", "hook"), ("off", "hook", "on"), ("hook", "on", "off"))
for round_ in range(ROUNDS):
    for mode in orders[round_ % 3]:
        clock = Clock()
        extra = {"on": [TimedReport()], "hook": [Hook()], "off": []}[mode]
        callbacks = [clock] + extra
        model.fit(dataset, epochs=1, steps_per_epoch=STEPS, verbose=0, callbacks=callbacks)
        results[mode].append(STEPS / (clock.end - clock.start))
        if mode == "on":
            on_fit_s += clock.end - clock.start
results["reports_sent"] = reporting.reporter().sent
results["own_share"] = TimedReport.own_s / on_fit_s  # the train-end hook runs after the clock's: a slight overcount
print("RESULT " + json.dumps(results), flush=True)
