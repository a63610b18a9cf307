"""``%%worker --framework jax``: Keras 3 on JAX across two real worker processes, from one cell with no
distribution code (the workers join their group before the cell: distlib/frameworks/jax.py).

The module's tests share one kernel and its JAX zygote (tests/shared_kernel.py): a kernel start and a zygote that
imports JAX and Keras cost seconds of CPU each time, and `make test` is CPU-bound.

1. Three runs: a Keras ``model.fit`` on a ``tf.data`` dataset (Keras shards it per process) trains both
   workers to the same weights with the loss going down, ``jax.process_count()`` is 2 in each, the workers forked from
   a JAX zygote that imported JAX, Keras on JAX and TensorFlow; then a long fit is stopped (``%workers stop``): each
   worker leaves after the same step and runs its ``finally:`` (distlib/frameworks/jax_stop.py), the run reads
   stopped, and no process is left; then a JAX session keeps its live model from one cell to the next, through a
   Stop of its cell (the session's own: both workers leave the fit after the same step, the model intact), and both
   workers' weights pulled into the kernel are equal.
2. A worker killed mid-fit: the group restarts and resumes from Keras' own ``BackupAndRestore``, both restarted
   workers loading the programs generation 0 compiled from JAX's persistent cache (worker 1 too: one key for every
   process on CPU, compat/jax/compile_cache.py); and, in one process with two CPU devices, that key is the same for
   either device and the program loaded for the second computes right.
3. A JAX session whose cell fails on one worker saves its objects by Keras' own saving, and a rebuild puts them back.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import zipfile
from pathlib import Path

import pytest
from conftest import processes_of_run_root, wait_until

pytestmark = pytest.mark.share_kernel

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
    # the zygote they forked from is the JAX one (its framework's key), which imported JAX and Keras on JAX and, as
    # TensorFlow is installed here, TensorFlow (keras.distribution.initialize imports it: distlib/frameworks/jax.py)
    zygote = kernel.value(
        "[z for z in __import__('nbworkers.magics.backends.zygotes', fromlist=['z']).zygotes().describe() "
        "if z['alive']]")
    forked_from = {int(run["forked"]) for run in (first, second)}
    assert forked_from <= {z["pid"] for z in zygote}, (forked_from, zygote)
    for pid in forked_from:
        modules = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"NBWORKERS_FRAMEWORK=jax" in modules and b"KERAS_BACKEND=jax" in modules
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert "jaxlib" in maps and "libtensorflow" in maps

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


# 2. A Keras-on-JAX worker killed mid-fit: the group restarts and resumes from Keras' own BackupAndRestore, which
# distlib.fit(checkpoint_dir=...) gives one folder per process (distlib/keras_fit_jax.py: every process takes part in
# Keras' save, whose throwaway optimizer is placed with a collective, and two writers of one .weights.h5 collide on
# its lock), with the ReportCallback it adds feeding the run's progress (which the kill waits for) under JAX. The cell
# prints EPOCH <generation> <epoch> (0-based) as each epoch begins and the CHECKSUM of its final weights.
RESTART_WAIT_TIMEOUT = 300  # seconds for a restarted 2-worker JAX run on 2 shared cores
SNAPSHOT = "__import__('nbworkers').get_cluster({name!r}).snapshot()"
RECOVERY_CELL = """%%worker -n 2 --framework jax --name {name} --max-restarts 2
import os, time
import numpy as np
import jax, keras
import tensorflow as tf  # tf.data: Keras on JAX shards it per process
from nbworkers import distlib

GENERATION = os.environ["NBWORKERS_GENERATION"]
CACHE = {{"cache_hits": 0, "cache_misses": 0}}  # JAX's persistent compilation cache, as this process used it


def cache_event(event, **_):
    kind = event.rsplit("/", 1)[-1]
    if kind in CACHE:
        CACHE[kind] += 1


jax.monitoring.register_event_listener(cache_event)
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


# Keras' fit with a ReportCallback and Keras' BackupAndRestore in <checkpoint_dir>/process-<i>
distlib.fit(model, dataset, epochs=4, steps_per_epoch=8, verbose=0, callbacks=[Markers()],
            checkpoint_dir=os.path.join(os.getcwd(), "backup-{name}"))
weights = [np.asarray(v.value.addressable_shards[0].data) for v in model.weights]
print("BACKUPS", sorted(os.listdir(os.path.join(os.getcwd(), "backup-{name}"))), flush=True)
print("CHECKSUM", repr(float(sum(np.abs(w).astype("float64").sum() for w in weights))), flush=True)
print("CACHE", GENERATION, CACHE["cache_hits"], CACHE["cache_misses"], flush=True)
"""


def test_a_killed_jax_worker_restarts_the_group_which_resumes_from_backup_and_restore(kernel, run_root: Path):
    name = "jaxdies"
    started = time.monotonic()
    assert not kernel.run(RECOVERY_CELL.format(name=name)).error

    def reached() -> bool:  # worker 1 reports (ReportCallback under JAX) a step into its second epoch
        snap = kernel.value(SNAPSHOT.format(name=name))
        worker = snap["workers"][1]
        return snap["generation"] == 0 and worker["pid"] is not None and worker["epoch"] == 2 and (
            worker["step"] or 0) >= 2

    assert wait_until(reached, 200, interval=0.2), kernel.value(SNAPSHOT.format(name=name))
    os.kill(kernel.value(SNAPSHOT.format(name=name))["workers"][1]["pid"], signal.SIGKILL)
    waited = kernel.run(f"%workers wait {name} --timeout {RESTART_WAIT_TIMEOUT}", timeout=RESTART_WAIT_TIMEOUT + 30)
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
    # the restarted workers load the programs generation 0 compiled: worker 1 too, from the entries worker 0 wrote
    # (JAX writes from process 0 alone; on CPU nbworkers keys them alike in every process: compat/jax/compile_cache.py)
    cache = [re.findall(r"^CACHE 1 (\d+) (\d+)$", log, re.M) for log in logs]
    assert all(found and int(found[-1][0]) > 0 for found in cache), f"{cache}\n{tails}"
    assert wait_until(lambda: not processes_of_run_root(run_root), 15)
    print(f"killed JAX worker to resumed end: {time.monotonic() - started:.1f} s")


# JAX's persistent cache keyed alike for a program on either of a process's two CPU devices (one process standing for
# two: each has its own device), so an entry one device's program wrote is loaded for the other and computes right
CACHE_KEYS = """
import json, sys, tempfile
import jax, jax.numpy as jnp, numpy as np
from nbworkers.distlib.compat.jax import compile_cache as jax_compile_cache

jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp())
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
if sys.argv[1] == "invariant":
    jax_compile_cache.invariant_keys()
hits = []
jax.monitoring.register_event_listener(lambda event, **_: hits.append(event.endswith("/cache_hits")))
program = jax.jit(lambda x: jnp.sin(x) * 2 + x)
first, second = jax.devices()
program(jax.device_put(np.arange(4.0), first)).block_until_ready()
before = sum(hits)
out = program(jax.device_put(np.arange(4.0), second))
print(json.dumps({"hits": sum(hits) - before, "devices": [d.id for d in out.devices()], "second": second.id,
                  "right": bool(np.allclose(np.asarray(out), np.sin(np.arange(4.0)) * 2 + np.arange(4.0)))}))
"""


def test_jax_cache_keys_on_cpu_are_the_same_for_every_device_and_the_loaded_program_computes_right(tmp_path: Path):
    import subprocess
    import sys

    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "2", "JAX_PLATFORMS": "cpu"}
    found = {}
    for mode in ("jax", "invariant"):
        done = subprocess.run([sys.executable, "-P", "-c", CACHE_KEYS, mode], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        found[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["jax"]["hits"] == 0, found  # JAX's own key names the device: the second device compiles again
    invariant = found["invariant"]
    assert invariant["hits"] == 1 and invariant["right"], found
    assert invariant["devices"] == [invariant["second"]], found  # loaded onto the device it was asked for


def test_jax_workers_run_on_without_the_cache_when_its_folder_is_unsafe(tmp_path: Path):
    import subprocess
    import sys

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # another user could swap what is made there: no cache, said, and the worker goes on
    code = ("from nbworkers.distlib.compat.jax import compile_cache as jax_compile_cache\n"
            "print('FOLDER', jax_compile_cache.enable())\n")
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "NBWORKERS_RUNTIME_DIR": str(shared), "JAX_PLATFORMS": "cpu"},
                          timeout=120)
    assert done.returncode == 0 and "FOLDER None" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "JAX's compiled programs are not kept" in done.stderr and str(shared) in done.stderr, done.stderr[-2000:]


# 3. A Keras-on-JAX session whose cell fails on one worker while the other trains: the session restarts its
# processes, worker 1 (which raised between steps) saves alone, by Keras' own saving (distlib/saved_state/
# keras_objects.py), a compiled model with its Adam slots, a standalone optimizer (SGD with momentum), a metric and a
# variable; re-running the cell that builds them puts them back on both workers exactly, and they train on together.
# Nothing written is a pickle, and only the user can read it.
SESSION_BUILD = """%%worker {flags} --session jtrain --block
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
net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])
opt = keras.optimizers.SGD(0.1, momentum=0.9)
opt.build(net.trainable_variables)  # a standalone optimizer, built in its cell
mean = keras.metrics.Mean()
step_size = keras.Variable(0.5)
"""
SESSION_TRAIN = """%%worker --session jtrain --block
model.fit(dataset, epochs=2, steps_per_epoch=8, verbose=0)
opt.apply([np.full(v.shape, 0.1, "float32") for v in net.trainable_variables], net.trainable_variables)
mean.update_state(2.0)
step_size.assign(0.25)
"""
SESSION_RAISE_ON_ONE = """%%worker --session jtrain --block
if os.environ["NBWORKERS_WORKER"] == "1":
    raise ValueError("only worker 1 fails")
model.fit(dataset, epochs=5, steps_per_epoch=50, verbose=0)  # worker 0 waits in a collective
"""
SESSION_STATE = ("[int(model.optimizer.iterations.numpy()), float(step_size.numpy()), int(opt.iterations.numpy()), "
                 "float(mean.result())] + [np.asarray(v.value).tolist() for v in "
                 "model.weights + model.optimizer.variables + net.weights + opt.variables]")


def test_a_jax_session_saves_its_model_by_keras_saving_and_a_rebuild_puts_it_back(kernel, run_root: Path):
    session = "__import__('nbworkers').session('jtrain')"
    for code in (SESSION_BUILD.format(flags="-n 2 --framework jax"), SESSION_TRAIN):
        result = kernel.run(code, timeout=240)
        assert not result.error and result.status == "ok", result.text
    before = kernel.value(f"{session}.pull({SESSION_STATE!r})")
    assert before[:4] == [16, 0.25, 1, 2.0], before[:4]
    started = time.monotonic()
    failed = kernel.run(SESSION_RAISE_ON_ONE, timeout=180)
    print(f"error on worker 1 -> saved, restarted, cell ended: {time.monotonic() - started:.2f} s")
    assert failed.status == "error" and "worker 1: ValueError: only worker 1 fails" in failed.error, failed.text
    assert "saved model (Keras model: 4 weights + " in failed.error, failed.error
    assert "step_size (variable: float32 ())" in failed.error, failed.error
    assert "opt (SGD: " in failed.error and "mean (" in failed.error, failed.error
    folders = sorted(run_root.glob("jtrain/session-state/gen-*/worker-*"))
    saved = sorted(p.name for folder in folders for p in folder.iterdir())
    for name in ("model.leaf0.weights.h5", "opt.leaf0.npz", "step_size.leaf0.npz"):  # Keras' saving, no pickle
        assert name in saved, saved
    for folder in folders:
        for path in folder.glob("*.npz"):
            with zipfile.ZipFile(path) as archive:
                assert all(name.endswith(".npy") for name in archive.namelist()), path
        modes = {p.name: oct(p.stat().st_mode & 0o777) for p in folder.iterdir() if p.suffix in (".h5", ".npz")}
        assert set(modes.values()) == {"0o600"}, modes
    rebuilt = kernel.run(SESSION_BUILD.format(flags=""), timeout=240)
    assert not rebuilt.error, rebuilt.text
    assert "Saved state put back at the end of this cell" in rebuilt.shown, rebuilt.text
    for worker in (0, 1):
        assert kernel.value(f"{session}.pull({SESSION_STATE!r}, worker={worker})") == before, worker
    trained = kernel.run(SESSION_TRAIN, timeout=240)  # the restored objects train on: collectives in the new processes
    assert not trained.error, trained.text
    after = [kernel.value(f"{session}.pull({SESSION_STATE!r}, worker={worker})") for worker in (0, 1)]
    assert after[0] == after[1] and after[0][:4] == [32, 0.25, 2, 2.0], after[0][:4]
    kernel.run("%workers stop jtrain")
