"""Fault tolerance end to end: real 2-worker TensorFlow runs through a real kernel, a worker killed,
preempted (SIGTERM) or hung, the group restarted by the supervisor, training resumed from its checkpoint.

Worker cells print marker lines the tests read from the per-worker logs:
``BATCH <generation> <epoch> <batch>`` once per epoch for the first batch a generation runs (0-based, so the
resume point is visible), ``START <generation> <epoch> <step>`` where a custom loop starts and ``SAVED
<generation> <epoch> <step>`` for its saves, ``CHECKSUM <float>`` of the final weights.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from cells import CUSTOM_LOOP_STEP
from conftest import processes_of_run_root, wait_until

WAIT_TIMEOUT = 240  # seconds for one restarted 2-worker run on 2 shared cores
POLL_TIMEOUT = 150  # seconds to reach the point where a test kills a worker
SNAPSHOT = "nbworkers.get_cluster({name!r}).snapshot()"
TF215_PYTHON = Path(__file__).resolve().parents[2] / ".venv-tf215" / "bin" / "python"  # `make estimator-env`
# Not share_kernel (tests/shared_kernel.py): with one kernel for the module, twice in four CI runs a finished run's
# worker 1 had no CHECKSUM line (ci13: the tf215 custom loop; ci16: chaos0), never seen with a kernel per test.

# Keras 3 through distlib.fit with checkpoint_dir: 4 epochs of 8 steps, ~1.5 s an epoch (a sleeping callback).
KERAS_CELL = """%%worker -n 2 --name {name} --max-restarts 2 --env NBWORKERS_MOCK_DATA=1 {flags}
import os, time
import numpy as np
import tensorflow as tf
import keras
from nbworkers import distlib

EPOCHS, STEPS, GLOBAL_BATCH, SLEEP = 4, 8, 32, {sleep}
GENERATION = os.environ["NBWORKERS_GENERATION"]
strategy = distlib.strategy()
rng = np.random.RandomState(int(os.environ["NBWORKERS_WORKER"]))  # different data on each worker
x = rng.rand(512, 8).astype("float32")
y = (x.sum(axis=1) > 4).astype("int64")
with strategy.scope():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(GLOBAL_BATCH)


def hang_here_waiting_for_nothing():
    print("HANGING", flush=True)
    time.sleep(3600)


class Markers(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_now, self.first = epoch, True

    def on_train_batch_begin(self, batch, logs=None):
        if self.first:
            print("BATCH", GENERATION, self.epoch_now, batch, flush=True)
            self.first = False

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(SLEEP)
        if {hang} and GENERATION == "0" and os.environ["NBWORKERS_WORKER"] == "1" and self.epoch_now == 1 and batch == 2:
            hang_here_waiting_for_nothing()


distlib.fit(model, dataset, epochs=EPOCHS, steps_per_epoch=STEPS, callbacks=[Markers()],
            checkpoint_dir=os.path.join(os.getcwd(), "ckpt-{name}"), verbose=0)
print("CHECKSUM", repr(float(sum(np.abs(w).astype("float64").sum() for w in model.get_weights()))), flush=True)
"""

# The custom-loop tutorial's pattern with TrainingCheckpoint, saving every SAVE_EVERY steps.
CUSTOM_LOOP_CELL = """%%worker -n 2 --name {name} --max-restarts 2 {flags}
import os, time
import numpy as np
import tensorflow as tf
import keras
from nbworkers import distlib

GLOBAL_BATCH, STEPS, EPOCHS, SAVE_EVERY, SLEEP = 32, 9, 3, 3, {sleep}
GENERATION = os.environ["NBWORKERS_GENERATION"]


""" + CUSTOM_LOOP_STEP + """

ckpt = distlib.TrainingCheckpoint(os.path.join(os.getcwd(), "ckpt-{name}"), model=model, optimizer=optimizer)
print("START", GENERATION, *ckpt.restore_or_initialize(), flush=True)
iterator = iter(dataset)
for epoch in ckpt.epochs(EPOCHS):
    for step in ckpt.steps(STEPS):
        loss = float(train_step(iterator))
        distlib.report(step=step + 1, epoch=epoch + 1, steps_total=STEPS, epochs_total=EPOCHS, loss=loss)
        time.sleep(SLEEP)
        if (step + 1) % SAVE_EVERY == 0:
            ckpt.save()
            print("SAVED", GENERATION, epoch, step + 1, flush=True)
print("CHECKSUM", repr(float(sum(np.abs(w.numpy()).astype("float64").sum() for w in model.weights))), flush=True)
"""


def snapshot(kernel, name: str) -> dict:
    return kernel.value(SNAPSHOT.format(name=name))


def worker_log(run_root: Path, name: str, index: int) -> str:
    return (run_root / name / f"worker-{index}.log").read_text(errors="replace")


def markers(log: str, kind: str) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in m.groups()) for m in re.finditer(rf"^{kind} (\d+) (\d+) (\d+)$", log, re.M)]


def checksums(log: str) -> list[str]:
    return re.findall(r"^CHECKSUM (\S+)$", log, re.M)


def kill_worker_when(kernel, name: str, index: int, sig: int, reached) -> dict:
    """Poll the cluster's snapshot until ``reached(worker_snapshot)`` for generation 0, then signal that worker."""
    def ready() -> bool:
        snap = snapshot(kernel, name)
        worker = snap["workers"][index]
        return snap["generation"] == 0 and worker["pid"] is not None and reached(worker)

    assert wait_until(ready, POLL_TIMEOUT, interval=0.2), snapshot(kernel, name)
    worker = snapshot(kernel, name)["workers"][index]
    os.kill(worker["pid"], sig)
    return worker


def wait_for(kernel, name: str) -> dict:
    waited = kernel.run(f"%workers wait {name} --timeout {WAIT_TIMEOUT}", timeout=WAIT_TIMEOUT + 30)
    assert not waited.error, waited.error
    return snapshot(kernel, name)


def assert_same_final_weights(run_root: Path, name: str) -> None:
    """Both workers printed the same final checksum (the last generation's: a worker that finished before its
    peer was killed prints one in each generation; the restarted one restores the final checkpoint)."""
    logs = [worker_log(run_root, name, i) for i in (0, 1)]
    sums = [checksums(log) for log in logs]
    tails = "\n".join(f"--- worker {i}'s log, its end:\n" + "\n".join(log.splitlines()[-40:]) for i, log in enumerate(logs))
    assert all(sums), f"{sums}\n{tails}"  # a str: pytest shows it whole
    assert sums[0][-1] == sums[1][-1], f"workers ended with different weights: {sums}"


def test_keras_fit_survives_kill_9_of_a_worker_in_epoch_2(kernel, run_root):
    name = "kerasdies"
    assert not kernel.run(KERAS_CELL.format(name=name, flags="", sleep=0.15, hang=False)).error
    # worker 1 reports epoch 2 (1-based) and a step into it: kill -9 it there
    killed = kill_worker_when(kernel, name, 1, signal.SIGKILL, lambda w: w["epoch"] == 2 and (w["step"] or 0) >= 2)
    snap = wait_for(kernel, name)
    assert snap["status"] == "finished", snap["error"]
    assert snap["restarts"] == 1
    entry = snap["restart_history"][0]
    assert entry["kind"] == "WorkerCrashed" and entry["worker"] == 1 and "SIGKILL" in entry["cause"], entry
    # saved after every epoch: the run resumed at the start of epoch 2, the one the kill interrupted
    assert entry["resumed_from"]["epoch"] == 2, entry
    for i in (0, 1):
        log = worker_log(run_root, name, i)
        first = markers(log, "BATCH")
        gen0 = [(e, b) for g, e, b in first if g == 0]
        gen1 = [(e, b) for g, e, b in first if g == 1]
        assert gen1 and gen1[0] == (1, 0), first  # epoch index 1 (the second), batch 0
        assert [e for e, _ in gen1] == [1, 2, 3], first  # and on to the end: all 4 epochs trained
        redone = max(e for e, _ in gen0) - gen1[0][0] + 1
        assert 0 <= redone <= 1, f"redone {redone} epochs, more than the save interval: {first}"
    assert killed["pid"] not in [w["pid"] for w in snap["workers"]]
    assert_same_final_weights(run_root, name)
    assert not processes_of_run_root(run_root)


def test_sigterm_preemption_saves_at_the_next_step_and_the_group_resumes_there(kernel, run_root):
    name = "preempted"
    assert not kernel.run(KERAS_CELL.format(name=name, flags="", sleep=0.15, hang=False)).error
    kill_worker_when(kernel, name, 1, signal.SIGTERM, lambda w: w["epoch"] == 2 and (w["step"] or 0) >= 3)
    snap = wait_for(kernel, name)
    assert snap["status"] == "finished", snap["error"]
    entry = snap["restart_history"][0]
    # every worker saved at the same step and left with PreemptionCheckpointHandler's restart code
    assert entry["kind"] == "WorkerPreempted" and "exit code 42" in entry["cause"], entry
    logs = [worker_log(run_root, name, i) for i in (0, 1)]
    assert "nbworkers: SIGTERM received: saving a checkpoint at the next step" in logs[1]
    saved = [re.findall(r"preemption checkpoint at epoch (\d+), step (\d+)", log) for log in logs]
    assert saved[0] and saved[0] == saved[1], saved  # the same step on both workers
    epoch, step = (int(v) for v in saved[0][-1])
    # 1-based epoch: after the step the signal came at, not back at the last epoch boundary; a signal that lands
    # after epoch 2's last step (the snapshot lags under load) saves at epoch 3's start
    assert (epoch == 2 and step >= 3) or (epoch, step) == (3, 0), saved
    for log in logs:
        gen1 = [(e, b) for g, e, b in markers(log, "BATCH") if g == 1]
        assert gen1[0] == (epoch - 1, step), gen1  # resumed at the saved step, nothing redone
    assert entry["resumed_from"] == {"epoch": epoch, "step": step + 1}, entry
    assert_same_final_weights(run_root, name)
    assert not processes_of_run_root(run_root)


def test_stopping_a_run_with_preemption_saving_on_still_stops_it(kernel, run_root):
    name = "stopme"
    assert not kernel.run(KERAS_CELL.format(name=name, flags="", sleep=0.15, hang=False)).error
    assert wait_until(lambda: (snapshot(kernel, name)["workers"][0]["epoch"] or 0) >= 2, POLL_TIMEOUT, 0.2)
    stopped = kernel.run(f"%workers stop {name}")
    assert not stopped.error, stopped.error
    snap = snapshot(kernel, name)
    assert snap["status"] == "stopped" and snap["restarts"] == 0, snap["error"]
    assert wait_until(lambda: not processes_of_run_root(run_root), 10)
    # the group's TERM was a preemption notice for every worker: they saved before leaving
    logs = [worker_log(run_root, name, i) for i in (0, 1)]
    assert all("preemption checkpoint at epoch" in log for log in logs), logs[0][-3000:]


def test_custom_loop_survives_kill_9_and_resumes_at_the_saved_step(kernel, run_root):
    name = "loopdies"
    assert not kernel.run(CUSTOM_LOOP_CELL.format(name=name, flags="", sleep=0.12)).error
    kill_worker_when(kernel, name, 1, signal.SIGKILL, lambda w: w["epoch"] == 2 and (w["step"] or 0) >= 5)
    snap = wait_for(kernel, name)
    assert snap["status"] == "finished", snap["error"]
    entry = snap["restart_history"][0]
    assert entry["kind"] == "WorkerCrashed" and entry["worker"] == 1, entry
    # the checkpoint kept is the chief's (worker 0's) last complete save; both workers restart exactly there
    chief_saves = [(e, s) for g, e, s in markers(worker_log(run_root, name, 0), "SAVED") if g == 0]
    for i in (0, 1):
        starts = [(e, s) for g, e, s in markers(worker_log(run_root, name, i), "START") if g == 1]
        assert starts == [chief_saves[-1]], (starts, chief_saves)
        assert starts[0][0] == 1 and starts[0][1] >= 3, starts  # mid-epoch 2, not its start: at the saved step
    epoch, done = starts[0]  # 0-based epoch, steps done in it; a save after its last step resumes the next epoch
    after = {"epoch": epoch + 2, "step": 1} if done == 9 else {"epoch": epoch + 1, "step": done + 1}  # 9: STEPS
    assert entry["resumed_from"] == after, entry
    assert_same_final_weights(run_root, name)
    assert not processes_of_run_root(run_root)


@pytest.mark.parametrize("python", [
    pytest.param("", id="tf-main"),
    pytest.param(str(TF215_PYTHON), id="tf215", marks=[  # the TensorFlow 2.15 environment, Keras 2
        pytest.mark.estimator, pytest.mark.skipif(not TF215_PYTHON.exists(), reason="needs `make estimator-env`"),
    ]),
])
def test_custom_loop_sigterm_saves_at_the_next_step(kernel, run_root, python):
    name = "looppreempt215" if python else "looppreempt"
    flags = f"--python {python}" if python else ""
    assert not kernel.run(CUSTOM_LOOP_CELL.format(name=name, flags=flags, sleep=0.12)).error
    kill_worker_when(kernel, name, 0, signal.SIGTERM, lambda w: w["epoch"] == 2 and (w["step"] or 0) >= 4)
    snap = wait_for(kernel, name)
    assert snap["status"] == "finished", snap["error"]
    entry = snap["restart_history"][0]
    assert entry["kind"] == "WorkerPreempted" and "exit code 42" in entry["cause"], entry
    logs = [worker_log(run_root, name, i) for i in (0, 1)]
    saved = [re.findall(r"preemption checkpoint at epoch (\d+), step (\d+)", log) for log in logs]
    assert saved[0] and saved[0] == saved[1], saved
    epoch, step = (int(v) for v in saved[0][-1])  # 0-based epoch here, steps done in it
    for log in logs:
        assert [(e, s) for g, e, s in markers(log, "START") if g == 1] == [(epoch, step)]
    assert_same_final_weights(run_root, name)


def test_watchdog_restarts_a_group_hung_in_real_training(kernel, run_root):
    name = "hangs"
    assert not kernel.run(KERAS_CELL.format(name=name, flags="--stall-timeout 20", sleep=0.1, hang=True)).error
    snap = wait_for(kernel, name)
    assert snap["status"] == "finished", snap["error"]
    entry = snap["restart_history"][0]
    assert entry["kind"] == "GroupStalled" and "--stall-timeout" in entry["cause"], entry
    hung = worker_log(run_root, name, 1)
    assert "HANGING" in hung
    # faulthandler's dump (SIGUSR1) of the hung worker names the function it hangs in, in the cell
    assert re.search(r"File \".*cell\.py\", line \d+ in hang_here_waiting_for_nothing", hung), hung[-4000:]
    waiting = worker_log(run_root, name, 0)
    assert "Thread 0x" in waiting or "Current thread" in waiting  # the peer waiting in a collective dumped too
    assert_same_final_weights(run_root, name)
    assert not processes_of_run_root(run_root)


# ---------------------------------------------------------------------------------------------- chaos
# 6 runs in `make test` (the test's docstring says why they are enough), 10 in `make soak` (tools/soak.py).
CHAOS_RUNS = int(os.environ.get("NBWORKERS_CHAOS_RUNS", "6"))
CHAOS_SEED = 20261122
CHAOS_EPOCHS, CHAOS_STEPS = 3, 5
CHAOS_CELL = """%%worker -n 2 --name {name} --max-restarts 2
import os, time
import numpy as np
import tensorflow as tf
import keras
from nbworkers import distlib

strategy = distlib.strategy()
x = np.random.RandomState(int(os.environ["NBWORKERS_WORKER"])).rand(256, 4).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1))).repeat().batch(16)
with strategy.scope():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")


class Slow(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.15)  # a run lasts ~2 s of steps: forked workers start in <1 s, and a kill must land first


distlib.fit(model, dataset, epochs={epochs}, steps_per_epoch={steps}, callbacks=[Slow()], verbose=0,
            checkpoint_dir={checkpoint_dir!r})
print("CHECKSUM", repr(float(sum(np.abs(w).astype("float64").sum() for w in model.get_weights()))), flush=True)
"""
# What a run may end as besides "finished": a permanent failure the supervisor names (none expected here).
PERMANENT_FAILURES = ("WorkerRaised", "RestartsExhausted", "RunTimedOut")

CHECKPOINT_CHECK = """
import json, sys
import tensorflow as tf
report = {}
for directory in sys.argv[1:]:
    latest = tf.train.latest_checkpoint(directory)
    if latest is None:
        report[directory] = None
        continue
    reader = tf.train.load_checkpoint(latest)
    values = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    report[directory] = {"path": latest, "tensors": len(values),
                         "epoch": int(values["epoch/.ATTRIBUTES/VARIABLE_VALUE"]),
                         "step": int(values["step_in_epoch/.ATTRIBUTES/VARIABLE_VALUE"])}
print("REPORT", json.dumps(report))
"""


def global_step(worker: dict) -> int:
    return ((worker["epoch"] or 1) - 1) * CHAOS_STEPS + (worker["step"] or 0) if worker["epoch"] else 0


def test_chaos_random_kills_end_finished_or_clearly_failed_and_leave_nothing_behind(kernel, run_root, tmp_path):
    """CHAOS_RUNS runs of 2 workers, each with one worker killed (SIGKILL or SIGTERM, seeded) at a random moment from
    start-up to the last steps: each run ends finished with equal weights on both workers or failed with a named
    permanent failure, leaves no process, and its checkpoint restores in a fresh process.

    Why 6 runs are enough here: with CHAOS_SEED the first 6 runs are (victim, signal, moment) = (0, TERM, step 10),
    (0, KILL, step 13), (0, KILL, step 12), (1, KILL, step 5), (1, TERM, 1.45 s after launch), (1, KILL, step 14):
    every worker with every signal, a kill while the workers start and kills early and late in training, which is
    what this test is for (runs 7-10 repeated (1, TERM) at a step and at start-up). `make soak` runs all 10 beside busy
    processes, where more runs catch more of the rare timings (NBWORKERS_CHAOS_RUNS=10, tools/soak.py)."""
    import random

    rng = random.Random(CHAOS_SEED)
    assert not kernel.run("nbworkers.settings().restart_backoff = 0.2").error
    total = CHAOS_EPOCHS * CHAOS_STEPS
    outcomes = []
    started = time.monotonic()
    for run in range(CHAOS_RUNS):
        name = f"chaos{run}"
        victim = rng.choice([0, 1])
        sig = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM])
        # a moment from just after launch (seconds, while the workers start: a fork, or a spawn's TensorFlow
        # import) to near the end (a training step)
        moment = ("startup", round(rng.uniform(0.2, 2.0), 2)) if rng.random() < 0.3 else ("step", rng.randint(1, total))
        checkpoint_dir = str(tmp_path / f"ckpt-{name}")
        cell = CHAOS_CELL.format(name=name, epochs=CHAOS_EPOCHS, steps=CHAOS_STEPS, checkpoint_dir=checkpoint_dir)
        launched = time.monotonic()
        assert not kernel.run(cell).error

        def reached() -> bool:
            snap = snapshot(kernel, name)
            worker = snap["workers"][victim]
            if snap["status"] in ("finished", "failed", "stopped") or worker["pid"] is None:
                return snap["status"] in ("finished", "failed", "stopped")
            if moment[0] == "startup":
                return time.monotonic() - launched >= moment[1]
            return global_step(worker) >= moment[1]

        assert wait_until(reached, POLL_TIMEOUT, interval=0.1), snapshot(kernel, name)
        pid = snapshot(kernel, name)["workers"][victim]["pid"]
        killed = False
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                os.kill(pid, sig)
                killed = True
        except (psutil.Error, ProcessLookupError, TypeError, ValueError):
            pass  # the run ended before the moment came
        snap = wait_for(kernel, name)
        outcome = (name, victim, signal.Signals(sig).name, moment, killed, snap["status"], snap["failure_kind"],
                   [e["kind"] for e in snap["restart_history"]], [e["resumed_from"] for e in snap["restart_history"]])
        outcomes.append(outcome)
        assert snap["status"] == "finished" or (
            snap["status"] == "failed" and snap["failure_kind"] in PERMANENT_FAILURES and snap["error"]
        ), (outcome, snap["error"])
        if snap["status"] == "finished":
            assert_same_final_weights(run_root, name)
        assert wait_until(lambda: not processes_of_run_root(run_root), 15), (outcome, processes_of_run_root(run_root))
    print("\n".join(map(str, outcomes)))
    print(f"chaos: {CHAOS_RUNS} runs in {time.monotonic() - started:.0f} s")
    assert sum(o[4] for o in outcomes) >= CHAOS_RUNS // 2, outcomes  # most runs really lost a worker
    # every checkpoint directory restores in a fresh process, finished runs at their last epoch
    directories = [str(tmp_path / f"ckpt-chaos{run}") for run in range(CHAOS_RUNS)]
    checked = subprocess.run([sys.executable, "-c", CHECKPOINT_CHECK, *directories], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert checked.returncode == 0, checked.stderr[-3000:]
    import json

    report = json.loads(checked.stdout.split("REPORT ", 1)[1])
    for outcome, directory in zip(outcomes, directories):
        if outcome[5] == "finished":
            assert report[directory] and report[directory]["epoch"] == CHAOS_EPOCHS, (outcome, report[directory])
        assert report[directory] is None or report[directory]["tensors"] > 4, report[directory]


# ---------------------------------------------------------------------------------------------- Estimator
ESTIMATOR_CELL = """%%worker -n 2 --name {name} --python {python} --max-restarts 2
import os, time
import tensorflow as tf
from nbworkers import distlib

BATCH_SIZE, MAX_STEPS = 16, 30
MODEL_DIR = os.path.join(os.getcwd(), "estimator-{name}")
GENERATION = os.environ["NBWORKERS_GENERATION"]


def input_fn(mode, input_context=None):
    features = tf.random.stateless_uniform((256, 8), seed=(1, 2))
    labels = tf.cast(tf.reduce_sum(features, axis=1) > 4, tf.int64)
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    if input_context:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return dataset.repeat().batch(BATCH_SIZE)


def model_fn(features, labels, mode):
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    logits = model(features, training=False)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf.keras.losses.Reduction.NONE)(labels, logits)
    loss = tf.reduce_sum(loss) * (1.0 / BATCH_SIZE)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss)
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(learning_rate=0.05)
    train_op = optimizer.minimize(loss, tf.compat.v1.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)


class Slow(tf.estimator.SessionRunHook):
    def after_run(self, run_context, run_values):
        time.sleep(0.1)


print("START", GENERATION, tf.train.latest_checkpoint(MODEL_DIR), flush=True)
config = distlib.run_config(model_dir=MODEL_DIR, save_checkpoints_steps=5)
classifier = tf.estimator.Estimator(model_fn=model_fn, config=config)
tf.estimator.train_and_evaluate(
    classifier,
    train_spec=tf.estimator.TrainSpec(input_fn=input_fn, max_steps=MAX_STEPS, hooks=[distlib.ReportHook(), Slow()]),
    eval_spec=tf.estimator.EvalSpec(input_fn=input_fn, steps=2),
)
print("FINAL", GENERATION, int(classifier.get_variable_value("global_step")), flush=True)
"""


@pytest.mark.estimator
@pytest.mark.skipif(not TF215_PYTHON.exists(), reason=f"needs {TF215_PYTHON}: run `make estimator-env`")
def test_estimator_killed_worker_restarts_and_continues_from_model_dir(kernel, run_root):
    name = "estimator"
    assert not kernel.run(ESTIMATOR_CELL.format(name=name, python=TF215_PYTHON)).error
    kill_worker_when(kernel, name, 1, signal.SIGKILL, lambda w: (w["step"] or 0) >= 12)
    snap = wait_for(kernel, name)
    assert snap["status"] == "finished", snap["error"]
    entry = snap["restart_history"][0]
    assert entry["kind"] == "WorkerCrashed" and entry["worker"] == 1, entry
    for i in (0, 1):
        log = worker_log(run_root, name, i)
        starts = dict(re.findall(r"^START (\d+) (\S+)$", log, re.M))
        assert starts["0"] == "None", starts
        resumed_at = int(re.search(r"model\.ckpt-(\d+)$", starts["1"]).group(1))  # the last checkpoint of run 0
        assert 5 <= resumed_at < 30 and resumed_at % 5 == 0, starts
        finals = [int(v) for v in re.findall(r"^FINAL 1 (\d+)$", log, re.M)]
        # the chief trained to the end; a non-chief reads model_dir's checkpoint before the chief's last save
        assert finals == [30] if i == 0 else (len(finals) == 1 and finals[0] >= resumed_at), finals
    assert entry["resumed_from"]["step"] >= resumed_at, entry  # continued from model_dir, not from step 0
    assert not processes_of_run_root(run_root)


# tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1): distlib.fit hands the model to Keras's own fit with BackupAndRestore.
TF_KERAS_CELL = """%%worker -n 2 --name {name} --max-restarts 2 --env TF_USE_LEGACY_KERAS=1
import os, time
import numpy as np
import tensorflow as tf
from nbworkers import distlib

GENERATION = os.environ["NBWORKERS_GENERATION"]
strategy = distlib.strategy()
rng = np.random.RandomState(int(os.environ["NBWORKERS_WORKER"]))
x = rng.rand(512, 8).astype("float32")
y = (x.sum(axis=1) > 4).astype("float32")
with strategy.scope():
    tf.keras.utils.set_random_seed(1)
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer=tf.keras.optimizers.SGD(0.05))
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
marks = tf.keras.callbacks.LambdaCallback(
    on_epoch_begin=lambda epoch, logs: print("EPOCH", GENERATION, epoch, flush=True),
    on_train_batch_end=lambda batch, logs: time.sleep({sleep}),
)
distlib.fit(model, dataset, epochs=4, steps_per_epoch=8, callbacks=[marks], verbose=0,
            checkpoint_dir=os.path.join(os.getcwd(), "ckpt-{name}"))
print("CHECKSUM", repr(float(sum(np.abs(w).astype("float64").sum() for w in model.get_weights()))), flush=True)
"""


def test_tf_keras_fit_with_checkpoint_dir_saves_on_sigterm_and_resumes(kernel, run_root):
    name = "tfkeras"
    # SIGTERM early in epoch 2, so that its save lands mid-epoch however late the kill: the kernel sees the step
    # through throttled reports and a snapshot per poll (ci2, a busy machine: a kill at step 3 of 8, 0.15 s each,
    # landed after the epoch's end and the save was epoch 3's)
    assert not kernel.run(TF_KERAS_CELL.format(name=name, sleep=0.3)).error
    kill_worker_when(kernel, name, 1, signal.SIGTERM, lambda w: w["epoch"] == 2 and (w["step"] or 0) >= 1)
    snap = wait_for(kernel, name)
    assert snap["status"] == "finished", snap["error"]
    entry = snap["restart_history"][0]
    assert entry["kind"] == "WorkerPreempted" and "exit code 42" in entry["cause"], entry
    assert entry["resumed_from"]["epoch"] == 2 and entry["resumed_from"]["step"] > 1, entry  # mid-epoch 2
    for i in (0, 1):
        epochs = re.findall(r"^EPOCH 1 (\d+)$", worker_log(run_root, name, i), re.M)
        assert epochs == ["1", "2", "3"], epochs
    assert_same_final_weights(run_root, name)
