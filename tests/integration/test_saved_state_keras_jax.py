"""A session's saved state with Keras 3 on JAX (``%%worker --framework jax``), by Keras' own saving
(distlib/saved_state/keras_objects.py), without a kernel: two real processes joined by Keras' own environment
contract and ``keras.distribution.initialize()`` with a ``DataParallel`` distribution, as the JAX bootstrap sets
them up. They train a compiled model, a standalone optimizer, a metric and a variable; worker 0 saves alone while
worker 1 waits outside any collective (as a session's save runs when a peer is gone); then both rebuild fresh
objects and restore them together: weights, the optimizers' iterations and slots, the metric and the variable come
back exactly, the same on both, and training goes on from there. Nothing written is a pickle.

(The TensorFlow counterpart is test_saved_state_objects.py.)"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile

import pytest

from nbworkers.magics.launch.ports import pick_free_ports

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")]

CODE = """
import json, os, sys, time
from pathlib import Path
import jax, keras
keras.distribution.initialize()
keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
import numpy as np
from nbworkers.distlib.saved_state import namespace as ss

run_dir, worker = Path(sys.argv[1]), jax.process_index()
os.environ.update(NBWORKERS_RUN_DIR=str(run_dir), NBWORKERS_WORKER=str(worker))
x = np.random.default_rng(0).random((16, 4)).astype("float32")
y = np.random.default_rng(1).random((16, 3)).astype("float32")
import tensorflow as tf  # tf.data only: Keras on JAX shards only a tf.data dataset across processes
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)

def local(v):  # this process's replica
    v = getattr(v, "value", v)
    return np.asarray(v)

def build():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    return {"model": model, "net": net, "opt": keras.optimizers.SGD(0.1, momentum=0.9),
            "loss": keras.metrics.Mean(), "scale": keras.Variable(0.5)}

ns = build()
ns["model"].fit(data, epochs=2, steps_per_epoch=2, verbose=0)
ns["opt"].build(ns["net"].trainable_variables)
for _ in range(3):
    ns["opt"].apply([np.full(v.shape, 0.1, "float32") for v in ns["net"].trainable_variables], ns["net"].trainable_variables)
ns["loss"].update_state(2.0)
ns["scale"].assign(0.25)
before = {name: [local(v) for v in value] for name, value in (
    ("model", ns["model"].weights), ("adam", ns["model"].optimizer.variables), ("net", ns["net"].weights),
    ("sgd", ns["opt"].variables))}
flag = run_dir / "saved"
if worker == 0:  # alone: worker 1 sleeps outside any collective
    report = ss.save_namespace(ns, run_dir, 1, 0, 2**30)
    saved = {e["name"]: e["detail"] for e in report["saved"]}
    assert set(saved) == {"model", "net", "opt", "loss", "scale"} and not report["skipped"], report
    assert saved["opt"].startswith("SGD: "), saved
    assert saved["model"].startswith("4 weights + "), saved
    flag.write_text("ok")
else:
    while not flag.exists():
        time.sleep(0.05)

fresh = build()  # the cells run again: fresh objects, their optimizers not built yet
fresh["opt"].build(fresh["net"].trainable_variables)  # the standalone one as its cell builds it
os.environ["NBWORKERS_GENERATION"] = "2"
restored = ss.restore_session_state(namespace=fresh)
assert restored["opt"] == "SGD, 3 steps taken", restored
after = {name: [local(v) for v in value] for name, value in (
    ("model", fresh["model"].weights), ("adam", fresh["model"].optimizer.variables), ("net", fresh["net"].weights),
    ("sgd", fresh["opt"].variables))}
for name in before:
    assert len(before[name]) == len(after[name]) and all(np.array_equal(a, b) for a, b in zip(before[name], after[name])), name
assert float(local(fresh["loss"].result())) == 2.0 and float(local(fresh["scale"])) == 0.25
fresh["model"].fit(data, epochs=1, steps_per_epoch=2, verbose=0)  # training goes on, both together
print("RESULT", json.dumps({"iterations": int(local(fresh["model"].optimizer.iterations)),
                            "sum": float(sum(np.abs(local(v)).sum() for v in fresh["model"].weights))}), flush=True)
"""


def test_worker_0_saves_alone_and_both_restore_keras_on_jax_exactly(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    ports = pick_free_ports(2)
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_NUM_CPU_DEVICES": "1", "TF_CPP_MIN_LOG_LEVEL": "3",
           "KERAS_DISTRIBUTION_JOB_ADDRESSES": ",".join(f"127.0.0.1:{p}" for p in ports),
           "KERAS_DISTRIBUTION_NUM_PROCESSES": "2"}
    procs = [subprocess.Popen([sys.executable, "-P", "-c", CODE, str(run_dir)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                              env={**env, "KERAS_DISTRIBUTION_PROCESS_ID": str(i)}) for i in range(2)]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=240)[0])
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    results = [[line for line in out.splitlines() if line.startswith("RESULT ")] for out in outputs]
    assert all(p.returncode == 0 for p in procs) and all(len(r) == 1 for r in results), \
        "\n=====\n".join(o[-4000:] for o in outputs)
    assert results[0] == results[1]  # the same weights and step count on both after training on
    assert '"iterations": 6' in results[0][0]  # 2 epochs of 2 steps saved, 1 more after the restore
    folder = run_dir / "session-state" / "gen-1" / "worker-0"
    written = sorted(p.name for p in folder.iterdir())
    assert "model.leaf0.weights.h5" in written and "opt.leaf0.npz" in written, written
    for path in folder.glob("*.npz"):
        with zipfile.ZipFile(path) as archive:
            assert all(name.endswith(".npy") for name in archive.namelist())
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in folder.iterdir() if p.suffix in (".h5", ".npz"))
