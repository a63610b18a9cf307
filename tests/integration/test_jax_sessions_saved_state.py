"""A Keras-on-JAX session (``--framework jax --session``) whose cell fails on one worker while the other trains: the
session restarts its processes, worker 1 (which raised between steps) saves the model with its optimizer and a
variable by Keras' own saving (distlib/saved_state/keras_objects.py), and re-running the cell that builds them puts
them back on both workers exactly, and they train on together."""

from __future__ import annotations

import importlib.util
import time

import pytest
from session_helpers import session_kernel_in

pytestmark = [pytest.mark.timeout(400),
              pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")]

BUILD = """%%worker {flags} --session jtrain --block
import os
import numpy as np
import jax, keras
import tensorflow as tf  # tf.data only

rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
step_size = keras.Variable(0.5)
"""
TRAIN = """%%worker --session jtrain --block
model.fit(dataset, epochs=2, steps_per_epoch=8, verbose=0)
step_size.assign(0.25)
"""
RAISE_ON_ONE = """%%worker --session jtrain --block
if os.environ["NBWORKERS_WORKER"] == "1":
    raise ValueError("only worker 1 fails")
model.fit(dataset, epochs=5, steps_per_epoch=50, verbose=0)  # worker 0 waits in a collective
"""
STATE = "[int(model.optimizer.iterations.numpy()), float(step_size.numpy())] + [w.tolist() for w in model.get_weights()]"


def test_a_jax_session_saves_its_model_by_keras_saving_and_a_rebuild_puts_it_back(tmp_path):
    with session_kernel_in(tmp_path) as k:
        session = "nbworkers.session('jtrain')"
        for code in (BUILD.format(flags="-n 2 --framework jax"), TRAIN):
            result = k.run(code, timeout=240)
            assert not result.error and result.status == "ok", result.text
        before = k.value(f"{session}.pull({STATE!r})")
        assert before[:2] == [16, 0.25], before[:2]
        started = time.monotonic()
        failed = k.run(RAISE_ON_ONE, timeout=180)
        print(f"error on worker 1 -> saved, restarted, cell ended: {time.monotonic() - started:.2f} s")
        assert failed.status == "error" and "worker 1: ValueError: only worker 1 fails" in failed.error, failed.text
        assert "saved model (Keras model: 4 weights + " in failed.error, failed.error
        assert "step_size (variable: float32 ())" in failed.error, failed.error
        saved = sorted(p.name for p in k.run_root.glob("jtrain/session-state/gen-*/worker-*/*"))
        assert "model.leaf0.weights.h5" in saved and "step_size.leaf0.npz" in saved, saved  # Keras' saving, no pickle
        rebuilt = k.run(BUILD.format(flags=""), timeout=240)
        assert not rebuilt.error, rebuilt.text
        assert "Saved state put back at the end of this cell" in rebuilt.shown, rebuilt.text
        for worker in (0, 1):
            assert k.value(f"{session}.pull({STATE!r}, worker={worker})") == before, worker
        trained = k.run(TRAIN, timeout=240)  # the restored model trains on: collectives work in the new processes
        assert not trained.error, trained.text
        after = [k.value(f"{session}.pull({STATE!r}, worker={worker})") for worker in (0, 1)]
        assert after[0] == after[1] and after[0][0] == 32, after[0][:2]
        k.run("%workers stop jtrain")
