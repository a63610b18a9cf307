"""``%%worker --framework jax``: Keras 3 on JAX across two real worker processes, from one cell with no
distribution code (the workers join their group before the cell: distlib/frameworks/jax.py).

One kernel, three runs: a Keras ``model.fit`` on a ``tf.data`` dataset (Keras shards it per process) trains both
workers to the same weights with the loss going down, ``jax.process_count()`` is 2 in each, the workers forked from
a zygote that imported JAX and Keras on JAX and not TensorFlow; then a long fit is stopped (``%workers stop``): each
worker leaves after the same step and runs its ``finally:`` (distlib/frameworks/jax_stop.py), the run reads
stopped, and no process is left; then a JAX session keeps its live model from one cell to the next, through a
Stop of its cell (the session's own: both workers leave the fit after the same step, the model intact), and both
workers' weights pulled into the kernel are equal.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from conftest import processes_of_run_root, wait_until

FIT_CELL = """%%worker -n 2 --framework jax --name jaxfit --block
import json, os, sys, time
import numpy as np
import jax, keras
import tensorflow as tf  # tf.data only: Keras on JAX shards a tf.data dataset per process

rng = np.random.RandomState(0)
features = rng.rand(512, 8).astype("float32")
labels = (features.sum(axis=1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(64)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer=keras.optimizers.SGD(0.2),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(dataset, epochs=4, verbose=0)
if jax.process_index() == 1:  # a peer busy longer than the atexit functions' 10 s after worker 0 (the coordinator) ends
    time.sleep(11)
weights = [np.asarray(v.value.addressable_shards[0].data) for v in model.weights]
print("RESULT", json.dumps({
    "processes": jax.process_count(), "index": jax.process_index(), "devices": len(jax.devices()),
    "backend": keras.backend.backend(), "loss": history.history["loss"],
    "weights": [w.astype("float64").ravel().tolist() for w in weights],
    "forked": os.environ.get("NBWORKERS_FORKED", ""),
}))
"""

STOP_CELL = """%%worker -n 2 --framework jax --name jaxstop
import time
import numpy as np
import jax, keras
import tensorflow as tf

dataset = tf.data.Dataset.from_tensor_slices(
    (np.random.rand(256, 8).astype("float32"), np.zeros(256, "int64"))).repeat().batch(32)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Started(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 2 and not getattr(self, "said", False):
            self.said = True
            print("TRAINING", flush=True)


try:
    model.fit(dataset, epochs=1000, steps_per_epoch=50, verbose=0, callbacks=[Started()])
finally:
    print("FINALLY", jax.process_index(), flush=True)
"""


LONG_SESSION_CELL = """%%worker --session jaxs
class Said(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 2 and not getattr(self, "said", False):
            self.said = True
            print("TRAINING", flush=True)


try:
    model.fit(dataset.repeat(), epochs=1000, steps_per_epoch=8, verbose=0, callbacks=[Said()])
finally:
    print("FINALLY", jax.process_index(), int(model.optimizer.iterations.numpy()), flush=True)
"""


def results(kernel, name: str) -> list[dict]:
    logs = kernel.value(f"[__import__('nbworkers').get_cluster({name!r}).logs(i) for i in range(2)]")
    found = [[json.loads(line.split("RESULT ", 1)[1]) for line in log.splitlines() if line.startswith("RESULT ")]
             for log in logs]
    assert all(len(f) == 1 for f in found), logs
    return [f[0] for f in found]


def test_keras_fit_on_jax_trains_two_processes_to_the_same_weights_and_stops(kernel, run_root: Path):
    started = time.monotonic()
    result = kernel.run(FIT_CELL, timeout=240)
    assert not result.error and result.status == "ok", result.text
    first, second = results(kernel, "jaxfit")
    for index, run in enumerate((first, second)):
        assert (run["processes"], run["index"], run["devices"], run["backend"]) == (2, index, 2, "jax"), run
        assert run["loss"][-1] < run["loss"][0], run["loss"]
        assert run["forked"], "the JAX workers were spawned, not forked from a JAX zygote"
    assert first["weights"] == second["weights"]  # one model: the same weights to the last bit
    restarts = kernel.value("[w['restarts'] for w in "
                            "__import__('nbworkers').get_cluster('jaxfit').snapshot()['workers']]")
    assert restarts == [0, 0]  # worker 0 waited for worker 1 at JAX's shutdown (its coordinator gone, 1 was aborted)
    assert first["loss"] == second["loss"]
    fit_seconds = time.monotonic() - started
    # the zygote they forked from imported JAX and Keras on JAX, never TensorFlow (the cell did, in the workers)
    zygote = kernel.value(
        "[z for z in __import__('nbworkers.magics.backends.zygotes', fromlist=['z']).zygotes().describe() "
        "if z['alive']]")
    forked_from = {int(run["forked"]) for run in (first, second)}
    assert forked_from <= {z["pid"] for z in zygote}, (forked_from, zygote)
    for pid in forked_from:
        modules = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"NBWORKERS_FRAMEWORK=jax" in modules and b"KERAS_BACKEND=jax" in modules
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert "jaxlib" in maps and "libtensorflow" not in maps and "_pywrap_tensorflow" not in maps

    stop_started = time.monotonic()
    assert not kernel.run(STOP_CELL).error
    try:
        assert wait_until(lambda: all("TRAINING" in log for log in kernel.value(
            "[__import__('nbworkers').get_cluster('jaxstop').logs(i) for i in range(2)]")), 120), \
            kernel.value("__import__('nbworkers').get_cluster('jaxstop').logs(0)")
        asked = time.monotonic()
        kernel.run("%workers stop jaxstop")
        stop_took = time.monotonic() - asked
        status = kernel.value("__import__('nbworkers').get_cluster('jaxstop').status")
        logs = kernel.value("[__import__('nbworkers').get_cluster('jaxstop').logs(i) for i in range(2)]")
    finally:
        kernel.run("%workers stop --all")
    assert status == "stopped", status
    assert stop_took < 1.0 + 2.0, stop_took  # under a second on a quiet machine (0.45 s); load adds the rest
    for index, log in enumerate(logs):
        assert f"FINALLY {index}" in log, f"stop took {stop_took:.1f} s\n" + "\n=====\n".join(logs)
    assert wait_until(lambda: not processes_of_run_root(run_root), 15)
    print(f"JAX fit run: {fit_seconds:.1f} s; stop run: {time.monotonic() - stop_started:.1f} s; "
          f"%workers stop took {stop_took:.2f} s")

    session_started = time.monotonic()
    # a JAX session: the live model stays from one cell to the next, both workers' weights pulled are equal
    session_cell = '''%%worker -n 2 --framework jax --session jaxs --block
import numpy as np
import jax, keras
import tensorflow as tf

rng = np.random.RandomState(1)
features = rng.rand(256, 8).astype("float32")
labels = (features.sum(axis=1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(32)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
model.compile(optimizer=keras.optimizers.SGD(0.1),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
first = model.fit(dataset, epochs=1, verbose=0).history["loss"]
'''
    result = kernel.run(session_cell, timeout=240)
    assert not result.error and result.status == "ok", result.text
    # its Stop (the session's own: every worker paused at the same step) keeps the live model intact on both
    assert not kernel.run(LONG_SESSION_CELL).error
    logs = [run_root / "jaxs" / f"worker-{i}.log" for i in range(2)]
    assert wait_until(lambda: all("TRAINING" in log.read_text() for log in logs), 120), logs[0].read_text()
    kernel.run("%workers stop jaxs --cell")
    assert wait_until(lambda: all("FINALLY" in log.read_text() for log in logs), 30), logs[0].read_text()
    finals = [next(line for line in log.read_text().splitlines() if line.startswith("FINALLY")) for log in logs]
    assert finals[0].split()[2] == finals[1].split()[2], finals  # the same step on both
    result = kernel.run("%%worker --session jaxs --block\n"
                        "second = model.fit(dataset, epochs=2, verbose=0).history['loss']\n"
                        "weights = [np.asarray(v.value.addressable_shards[0].data) for v in model.weights]",
                        timeout=240)
    assert not result.error and result.status == "ok", result.text
    pulled = kernel.value("[[w.tolist() for w in __import__('nbworkers').session('jaxs').pull('weights', worker=i)] "
                          "for i in range(2)]")
    losses = kernel.value("[__import__('nbworkers').session('jaxs').pull('first + second', worker=i) "
                          "for i in range(2)]")
    kernel.run("%workers stop jaxs")
    assert pulled[0] == pulled[1], pulled
    assert losses[0] == losses[1] and losses[0][-1] < losses[0][0], losses
    print(f"JAX session: {time.monotonic() - session_started:.1f} s")
