"""A Keras-on-JAX worker killed mid-fit (``%%worker --framework jax``): the group restarts and resumes from Keras'
own ``BackupAndRestore``, which ``distlib.fit(checkpoint_dir=...)`` gives one folder per process
(distlib/keras_fit_jax.py: every process takes part in Keras' save, whose throwaway optimizer is placed with a
collective, and two writers of one ``.weights.h5`` collide on its lock), with the ``ReportCallback`` it adds feeding
the run's progress (which the kill waits for) under JAX.

The cell prints ``EPOCH <generation> <epoch>`` (0-based) as each epoch begins and ``CHECKSUM`` of its final weights.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import time
from pathlib import Path

import pytest
from conftest import processes_of_run_root, wait_until

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")

WAIT_TIMEOUT = 300  # seconds for a restarted 2-worker JAX run on 2 shared cores
SNAPSHOT = "nbworkers.get_cluster({name!r}).snapshot()"

CELL = """%%worker -n 2 --framework jax --name {name} --max-restarts 2
import os, time
import numpy as np
import jax, keras
import tensorflow as tf  # tf.data: Keras on JAX shards it per process
from nbworkers import distlib

GENERATION = os.environ["NBWORKERS_GENERATION"]
rng = np.random.RandomState(0)
x = rng.rand(512, 8).astype("float32")
y = (x.sum(axis=1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Markers(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        print("EPOCH", GENERATION, epoch, flush=True)

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.15)


# Keras' fit with a ReportCallback and Keras' BackupAndRestore in <checkpoint_dir>/process-<i> (distlib/keras_fit_jax.py)
distlib.fit(model, dataset, epochs=4, steps_per_epoch=8, verbose=0, callbacks=[Markers()],
            checkpoint_dir=os.path.join(os.getcwd(), "backup-{name}"))
weights = [np.asarray(v.value.addressable_shards[0].data) for v in model.weights]
print("BACKUPS", sorted(os.listdir(os.path.join(os.getcwd(), "backup-{name}"))), flush=True)
print("CHECKSUM", repr(float(sum(np.abs(w).astype("float64").sum() for w in weights))), flush=True)
"""


def test_a_killed_jax_worker_restarts_the_group_which_resumes_from_backup_and_restore(kernel, run_root: Path):
    name = "jaxdies"
    started = time.monotonic()
    assert not kernel.run(CELL.format(name=name)).error

    def reached() -> bool:  # worker 1 reports (ReportCallback under JAX) a step into its second epoch
        snap = kernel.value(SNAPSHOT.format(name=name))
        worker = snap["workers"][1]
        return snap["generation"] == 0 and worker["pid"] is not None and worker["epoch"] == 2 and (
            worker["step"] or 0) >= 2

    assert wait_until(reached, 200, interval=0.2), kernel.value(SNAPSHOT.format(name=name))
    os.kill(kernel.value(SNAPSHOT.format(name=name))["workers"][1]["pid"], signal.SIGKILL)
    waited = kernel.run(f"%workers wait {name} --timeout {WAIT_TIMEOUT}", timeout=WAIT_TIMEOUT + 30)
    snap = kernel.value(SNAPSHOT.format(name=name))
    logs = [(run_root / name / f"worker-{i}.log").read_text(errors="replace") for i in (0, 1)]
    tails = "\n=====\n".join("\n".join(log.splitlines()[-40:]) for log in logs)
    assert not waited.error and snap["status"] == "finished", f"{snap['error']}\n{tails}"
    assert snap["restarts"] == 1
    entry = snap["restart_history"][0]
    assert entry["kind"] == "WorkerCrashed" and entry["worker"] == 1 and "SIGKILL" in entry["cause"], entry
    assert entry["resumed_from"]["epoch"] == 2, entry  # epoch 1 was backed up: the restart began at epoch 2
    for log in logs:
        epochs = [int(e) for e in re.findall(r"^EPOCH 1 (\d+)$", log, re.M)]
        assert epochs == [1, 2, 3], f"{epochs}\n{tails}"  # generation 1 skipped the backed-up epoch 0
        assert "BACKUPS ['process-0', 'process-1']" in log, tails  # one Keras backup folder per process
    sums = [re.findall(r"^CHECKSUM (\S+)$", log, re.M) for log in logs]
    assert sums[0] and sums[1] and sums[0][-1] == sums[1][-1], sums
    assert wait_until(lambda: not processes_of_run_root(run_root), 15)
    print(f"killed JAX worker to resumed end: {time.monotonic() - started:.1f} s")
