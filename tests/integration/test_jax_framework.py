"""``%%worker --framework jax``: Keras 3 on JAX across two real worker processes, from one cell with no
distribution code (the workers join their group before the cell: distlib/frameworks/jax.py).

A Keras ``model.fit`` on a ``tf.data`` dataset (Keras shards it per process) trains both
workers to the same weights with the loss going down, ``jax.process_count()`` is 2 in each, the workers forked from
a zygote that imported JAX and Keras on JAX and not TensorFlow.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

FIT_CELL = """%%worker -n 2 --framework jax --name jaxfit --block
import json, os, sys
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
weights = [np.asarray(v.value.addressable_shards[0].data) for v in model.weights]
print("RESULT", json.dumps({
    "processes": jax.process_count(), "index": jax.process_index(), "devices": len(jax.devices()),
    "backend": keras.backend.backend(), "loss": history.history["loss"],
    "weights": [w.astype("float64").ravel().tolist() for w in weights],
    "forked": os.environ.get("NBWORKERS_FORKED", ""),
}))
"""

def results(kernel, name: str) -> list[dict]:
    logs = kernel.value(f"[__import__('nbworkers').get_cluster({name!r}).logs(i) for i in range(2)]")
    found = [[json.loads(line.split("RESULT ", 1)[1]) for line in log.splitlines() if line.startswith("RESULT ")]
             for log in logs]
    assert all(len(f) == 1 for f in found), logs
    return [f[0] for f in found]


def test_keras_fit_on_jax_trains_two_processes_to_the_same_weights(kernel):
    started = time.monotonic()
    result = kernel.run(FIT_CELL, timeout=240)
    assert not result.error and result.status == "ok", result.text
    first, second = results(kernel, "jaxfit")
    for index, run in enumerate((first, second)):
        assert (run["processes"], run["index"], run["devices"], run["backend"]) == (2, index, 2, "jax"), run
        assert run["loss"][-1] < run["loss"][0], run["loss"]
        assert run["forked"], "the JAX workers were spawned, not forked from a JAX zygote"
    assert first["weights"] == second["weights"]  # one model: the same weights to the last bit
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

    print(f"JAX fit run: {fit_seconds:.1f} s")
