# The training script every start-up benchmark runs, unchanged, two ways: as the TensorFlow tutorial's
# `python main.py &` with TF_CONFIG set (the baseline), and as the body of a `%%worker` cell.
# It prints "FIRST_STEP <unix time>" when its first training step has finished (all-reduced with the
# other workers: MultiWorkerMirroredStrategy syncs every step), then trains a few steps more.
import json
import os
import time

import numpy as np
import tensorflow as tf

STEPS = int(os.environ.get("BENCH_STEPS", "5"))
STEP_DELAY = float(os.environ.get("BENCH_STEP_DELAY", "0"))  # seconds of sleep per step (recovery runs)

strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
rng = np.random.RandomState(index)
x = rng.rand(1024, 28, 28).astype("float32")
y = rng.randint(0, 10, size=1024).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Flatten(input_shape=(28, 28)),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(0.01),
    )


class FirstStep(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = False

    def on_train_batch_end(self, batch, logs=None):
        if not self.seen:
            self.seen = True
            print(f"FIRST_STEP {time.time():.6f}", flush=True)
        if STEP_DELAY:
            time.sleep(STEP_DELAY)


model.fit(dataset, epochs=1, steps_per_epoch=STEPS, verbose=0, callbacks=[FirstStep()])
print("DONE", flush=True)
