"""A session's saved state after one worker's error (issue 31), called from ``benchmarks/run.py``
(``--only saved_state``).

In a 2-worker session (Keras 3, MultiWorkerMirroredStrategy, the custom-loop style: a model, a standalone
``keras.optimizers.Adam`` and a traced step), a model of 2 x Dense(2048 -> 2048) + Dense(2048 -> 10):
8.4 M parameters, 34 MB of weights and 67 MB of Adam slots (~100 MB in all). Per repetition:

- baseline, training to that point: the build cell (strategy, data, model, optimizer, step) plus the training cell
  (``STEPS`` steps), run one after the other in a fresh session, from sending the first to the end of the second;
- one worker's error -> state restored: worker 1 raises while worker 0 waits in the step's all-reduce; the time from
  worker 1's error to the end of the re-run build cell, at whose end each saved object is read back
  (``NBWORKERS_RESTORE_ON_REBUILD``, the default). It holds: worker 0's save (~100 MB written as a TensorFlow
  checkpoint), the processes' restart, and the re-run cell with the restore. Its parts: error -> the failed cell in
  the kernel (the save and the restart asked), -> the re-run cell's end;
- ``%workers restore NAME``: the same state read again by the explicit command (every worker reads worker 0's
  checkpoint);
- checked each time: the optimizer's iterations are back on both workers, equal, at least ``STEPS`` (worker 0
  saves what it holds: ``STEPS``, or one more when the error cut a step whose increment it had applied).

Target: the error -> restored time below the time to train to that point (the save is worth it); printed as met /
not met. (More steps make the baseline longer and leave the restore as it is.)
"""

from __future__ import annotations

import statistics
import time

STEPS = 40
UNITS = 2048
TARGET_RATIO = 1.0  # x the time to train to that point

BUILD = """%%worker {launch}--session {name} --block
import os
import numpy as np
import tensorflow as tf
import keras
from nbworkers import distlib

strategy = distlib.strategy()
rng = np.random.default_rng(int(os.environ["NBWORKERS_WORKER"]))
x = rng.normal(size=(256, {units})).astype("float32")
y = rng.integers(0, 10, size=(256,))
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
with strategy.scope():
    model = keras.Sequential([keras.Input(({units},)), keras.layers.Dense({units}, activation="relu"),
                              keras.layers.Dense({units}, activation="relu"), keras.layers.Dense(10)])
    optimizer = keras.optimizers.Adam(1e-4)

@tf.function
def train_step(xb, yb):
    def replica(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(yb, logits, from_logits=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    strategy.run(replica, (xb, yb))
"""
TRAIN = """%%worker --session {name} --block
for xb, yb in dataset.take({steps}):
    train_step(xb, yb)
"""
RAISE = """%%worker --session {name} --block --no-raise
import time
if os.environ["NBWORKERS_WORKER"] == "1":
    time.sleep(1.0)  # worker 0 is inside the all-reduce of a step by now
    raise ValueError("worker 1 fails")
for xb, yb in dataset.take(1000):
    train_step(xb, yb)
"""


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def bench(kernel, reps: int, log) -> dict:
    rows = []
    for rep in range(reps):
        name = f"saved-{rep}"
        session = f"nbworkers.session({name!r})"
        t0 = time.time()
        kernel.output(BUILD.format(launch="-n 2 ", name=name, units=UNITS), timeout=300)
        kernel.output(TRAIN.format(name=name, steps=STEPS), timeout=600)
        trained = time.time() - t0
        size = kernel.value(f"{session}.pull('sum(int(v.numpy().nbytes) for v in model.weights + "
                            "optimizer.variables)')") / 1e6
        kernel.output(RAISE.format(name=name), timeout=300)
        cell = f"{session}.cells[-1]"
        raised, failed = kernel.value(f"({cell}.ends[1].t, {cell}.ended)")
        kernel.output(BUILD.format(launch="", name=name, units=UNITS), timeout=300)
        restored = kernel.value(f"{cell}.ended")
        iterations = kernel.value(f"[{session}.pull('int(optimizer.iterations.numpy())', worker=w) for w in (0, 1)]")
        t1 = time.monotonic()
        kernel.output(f"%workers restore {name}", timeout=300)
        explicit = time.monotonic() - t1
        kernel.output(f"%workers stop {name}")
        row = {"trained": trained, "size_mb": size, "restored": restored - raised, "failed": failed - raised,
               "rebuilt": restored - failed, "explicit": explicit, "iterations": iterations,
               "iterations_back": iterations[0] == iterations[1] >= STEPS}
        log(f"saved state rep {rep + 1}/{reps}: {size:.0f} MB; train to that point {trained:.2f} s; error -> "
            f"restored {row['restored']:.2f} s (failed cell {row['failed']:.2f} s, re-run build cell "
            f"{row['rebuilt']:.2f} s); %workers restore {explicit:.2f} s; iterations back: {iterations}")
        rows.append(row)
    medians = {key: _median(r[key] for r in rows) for key in ("size_mb", "trained", "restored", "failed", "rebuilt",
                                                               "explicit")}
    return {"runs": rows, **medians, "ratio": _median(r["restored"] / r["trained"] for r in rows),
            "iterations_back": all(r["iterations_back"] for r in rows)}


def rows(result: dict) -> list[tuple[str, str, str, str]]:
    size = f"{result['size_mb']:.0f} MB weights + Adam slots"
    met = "met" if result["ratio"] <= TARGET_RATIO else "NOT met"
    iterations = result["runs"][-1]["iterations"][0]
    back = (f"optimizer iterations back on both workers ({iterations})" if result["iterations_back"]
            else "iterations NOT back (!)")
    return [
        (f"saved state: training to that point (build + {STEPS} steps, {size})", f"{result['trained']:.2f} s",
         "baseline", ""),
        ("saved state: one worker's error -> state restored (re-run build cell)", f"{result['restored']:.2f} s",
         f"{result['ratio']:.2f}x training", f"< {TARGET_RATIO:g}x: {met}; {back}"),
        ("saved state: of which error -> failed cell (save + restart asked)", f"{result['failed']:.2f} s", "", ""),
        ("saved state: of which restart + re-run build cell with the restore", f"{result['rebuilt']:.2f} s", "", ""),
        ("saved state: `%workers restore` of the same state", f"{result['explicit']:.2f} s", "", ""),
    ]
