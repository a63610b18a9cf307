"""A session's saved state with real TensorFlow and Keras, in one process each (no kernel, no strategy): every
kind of trackable written with tf.train.Checkpoint and read back into rebuilt objects (distlib/saved_state/). The
logic is unit-tested with stand-ins (tests/unit/test_session_state.py); the session's whole path, with two workers
under MultiWorkerMirroredStrategy, is tests/integration/test_sessions_saved_state.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(180)

PRELUDE = """
import os, sys
import numpy as np
import tensorflow as tf
from nbworkers.distlib.saved_state import namespace as ss
os.environ["NBWORKERS_RUN_DIR"] = sys.argv[1]
x = np.random.default_rng(0).random((8, 4)).astype("float32")
y = np.random.default_rng(1).random((8, 3)).astype("float32")

def same(a, b):
    return len(a) == len(b) and all(np.array_equal(np.asarray(p), np.asarray(q)) for p, q in zip(a, b))

def restore(namespace):
    os.environ["NBWORKERS_GENERATION"] = "2"
    return ss.restore_session_state(namespace=namespace)
"""

KERAS3 = PRELUDE + """
import keras

def build():
    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5), keras.layers.Dense(3)])
    compiled = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    compiled.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    module = tf.Module()
    module.v = tf.Variable([1.0, 2.0])
    return {"net": net, "opt": keras.optimizers.Adam(0.01), "compiled": compiled, "loss": keras.metrics.Mean(),
            "module": module, "scale": tf.Variable(0.5), "ckpt": tf.train.Checkpoint(v=tf.Variable(3.0))}

ns = build()
ns.update(pair=(ns["net"], np.arange(3.0), "tag"), by_name={"m": ns["loss"], "n": 3}, arrays=(np.ones(2), [1, 2]),
          stream=(i for i in range(3)))

@tf.function
def step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((ns["net"](xb) - yb) ** 2)
    ns["opt"].apply_gradients(zip(tape.gradient(loss, ns["net"].trainable_variables), ns["net"].trainable_variables))
    ns["loss"].update_state(loss)

for _ in range(7):
    step(x, y)
ns["compiled"].fit(x, y, epochs=2, verbose=0)
ns["scale"].assign(0.25)
ns["module"].v.assign([4.0, 5.0])
before = {"opt": [v.numpy() for v in ns["opt"].variables], "net": ns["net"].get_weights(),
          "sgd": [v.numpy() for v in ns["compiled"].optimizer.variables], "loss": float(ns["loss"].result())}
report = ss.save_namespace(ns, sys.argv[1], 1, 0, 2**30)
saved = {e["name"]: (e["kind"], e["detail"]) for e in report["saved"]}
assert saved["opt"][0] == "checkpoint" and saved["opt"][1].startswith("Adam: 10 variables (iterations 7), "), saved
assert saved["compiled"][1].startswith("2 weights + 4 optimizer variables, "), saved  # iterations, lr, momentums
assert set(saved) == {"net", "opt", "compiled", "loss", "module", "scale", "ckpt", "pair", "by_name", "arrays"}
assert [s["name"] for s in report["skipped"]] == ["stream"] and "a generator" in report["skipped"][0]["why"]

fresh = build()  # the cells run again: fresh objects, the optimizers not built yet
fresh["pair"] = (fresh["net"], np.zeros(3), "other")
fresh["by_name"] = {"m": fresh["loss"], "n": 0}
restored = restore(fresh)
assert restored["opt"] == "Adam, 7 steps taken", restored
assert same([v.numpy() for v in fresh["opt"].variables], before["opt"])  # iterations, learning rate, m and v
assert same(fresh["net"].get_weights(), before["net"])
assert same([v.numpy() for v in fresh["compiled"].optimizer.variables], before["sgd"])  # momentum too
assert float(fresh["loss"].result()) == before["loss"] and float(fresh["scale"].numpy()) == 0.25
assert fresh["module"].v.numpy().tolist() == [4.0, 5.0] and float(fresh["ckpt"].v.numpy()) == 3.0
assert fresh["pair"][0] is fresh["net"] and fresh["pair"][1].tolist() == [0, 1, 2] and fresh["pair"][2] == "tag"
assert fresh["by_name"]["n"] == 3 and fresh["arrays"][1] == [1, 2]
print("KERAS3 OK")
"""

TF_KERAS = PRELUDE + """
keras = tf.keras

def build():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    return model

model = build()
model.fit(x, y, epochs=3, verbose=0)
before = [v.numpy() for v in model.optimizer.variables]
ss.save_namespace({"model": model}, sys.argv[1], 1, 0, 2**30)
fresh = build()
assert restore({"model": fresh}) == {"model": "2 weights + 5 optimizer variables"}
assert same([v.numpy() for v in fresh.optimizer.variables], before) and same(fresh.get_weights(), model.get_weights())
print("TF_KERAS OK")
"""


@pytest.mark.parametrize("code, legacy", [(KERAS3, "0"), (TF_KERAS, "1")], ids=["keras3", "tf_keras"])
def test_every_kind_of_trackable_comes_back_exactly_into_rebuilt_objects(tmp_path, code, legacy):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": legacy}
    out = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True, timeout=150,
                         env=env)
    assert out.returncode == 0 and " OK" in out.stdout, (out.stdout + out.stderr)[-4000:]
    assert "WARNING:tensorflow" not in out.stderr, out.stderr[-3000:]  # nothing left unrestored or unmatched
