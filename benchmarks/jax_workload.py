# The Keras-on-JAX training script the JAX start-up benchmark (benchmarks/jax_startup.py) runs two ways: by hand
# (two `python -P` processes with Keras' environment contract, BENCH_JAX_HAND=1: the script itself calls
# keras.distribution.initialize() and sets DataParallel, as a user without nbworkers would), and as the body of a
# `%%worker -n 2 --framework jax` cell (the worker bootstrap did both; the cell has no distribution code).
# It prints "FIRST_STEP <unix time>" after its first training step (all-reduced across the processes: DataParallel
# syncs every step), then "STEADY <steps/s>" over the steps after the first ten, and "CHECKSUM" of its weights.
import os
import time

if os.environ.get("BENCH_JAX_HAND") == "1":  # the hand launch: what the %%worker bootstrap does for a cell
    import jax
    import keras

    keras.distribution.initialize()  # KERAS_DISTRIBUTION_JOB_ADDRESSES / _NUM_PROCESSES / _PROCESS_ID
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))

import jax
import keras
import numpy as np
import tensorflow as tf  # tf.data: Keras 3.15 auto-shards only a tf.data.Dataset across processes

STEPS = int(os.environ.get("BENCH_STEPS", "60"))
WARMUP = 10  # steps before the steady figure's clock starts (tracing, the first collectives)

rng = np.random.RandomState(jax.process_index())
x = rng.rand(1024, 28, 28).astype("float32")
y = rng.randint(0, 10, size=1024).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(2 * 64).repeat()  # 64 per process

model = keras.Sequential([
    keras.Input((28, 28)),
    keras.layers.Flatten(),
    keras.layers.Dense(128, activation="relu"),
    keras.layers.Dense(10),
])
model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), optimizer=keras.optimizers.SGD(0.01))


class Timing(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.started = None

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            print(f"FIRST_STEP {time.time():.6f}", flush=True)
        elif batch + 1 == WARMUP:
            self.started = time.perf_counter()
        elif batch + 1 == STEPS and self.started is not None:
            print(f"STEADY {(STEPS - WARMUP) / (time.perf_counter() - self.started):.3f}", flush=True)


model.fit(dataset, epochs=1, steps_per_epoch=STEPS, verbose=0, callbacks=[Timing()])
kernel = model.layers[-1].kernel.value  # a global array: this process's replica
print("PROCESSES", jax.process_count(), "CHECKSUM", float(np.abs(np.asarray(kernel.addressable_shards[0].data)).sum()),
      flush=True)
print("DONE", flush=True)
