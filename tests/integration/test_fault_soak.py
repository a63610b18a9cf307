"""A fault soak (recovery must hold up under repeated kills, not once): one real 2-worker custom-loop run, ``kill -9`` of a random worker at a random moment,
KILLS times in a row (the generation after the last kill trains a few steps more and ends). After every kill the group restarts from the last checkpoint with identical weights on both
workers (each generation prints its restore point and a checksum of the restored weights), the run finishes with
identical final weights, and no process is left.

KILLS is 6 in `make test`, 10 in `make soak` (NBWORKERS_SOAK_KILLS, tools/soak.py). Why 6 are enough for what this
test is for: with SOAK_SEED's 6 kills both workers are killed, at moments 0.02 to 0.57 s after a step (a save after
every step: kills inside and between saves), and the group restarted from a restart five times over, so a resume
that reads another checkpoint than its peer's, goes backwards, or leaves a process of an earlier generation fails
here as with 10 (kills 7-10 fall within the same range of moments). The 10 are `make soak`'s, beside busy
processes, where more kills catch more of the rare timings.

Kept short for a 2-core machine: zygotes on (the kernel fixture's default: a restart forks workers from the
zygote, TensorFlow already imported), a short stop grace and restart backoff, a save after every step.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time

import psutil
from cells import CUSTOM_LOOP_STEP
from conftest import ended, processes_of_run_root, wait_until
from integration.test_fault_tolerance import assert_same_final_weights, snapshot, worker_log

KILLS = int(os.environ.get("NBWORKERS_SOAK_KILLS", "6"))  # the module's docstring says why 6 in `make test`
SOAK_SEED = int(os.environ.get("NBWORKERS_SOAK_SEED", "1515"))
STEPS, EPOCHS = 200, 2  # far more steps than ten kills need; the generation after the last kill trains FINAL_STEPS
FINAL_STEPS = 5
GENERATION_TIMEOUT = 90  # seconds for one restarted generation to report progress on 2 shared cores
WAIT_TIMEOUT = 180

SOAK_CELL = """%%worker -n 2 --name {name} --max-restarts {restarts}
import os, time
import numpy as np
import tensorflow as tf
import keras
from nbworkers import distlib

GLOBAL_BATCH, STEPS, EPOCHS = 32, {steps}, {epochs}
GENERATION = os.environ["NBWORKERS_GENERATION"]


""" + CUSTOM_LOOP_STEP + """

def checksum():
    return repr(float(sum(np.abs(w.numpy()).astype("float64").sum() for w in model.weights)))


ckpt = distlib.TrainingCheckpoint({checkpoint_dir!r}, model=model, optimizer=optimizer)
epoch0, step0 = ckpt.restore_or_initialize()
print("START", GENERATION, epoch0, step0, checksum(), flush=True)
iterator = iter(dataset)
last, done = GENERATION == "{kills}", 0  # after the last kill: a few more steps (the same on both workers), then end
for epoch in ckpt.epochs(EPOCHS):
    for step in ckpt.steps(STEPS):
        loss = float(train_step(iterator))
        distlib.report(step=step + 1, epoch=epoch + 1, steps_total=STEPS, epochs_total=EPOCHS, loss=loss)
        time.sleep(0.03)
        ckpt.save()
        done += 1
        if last and done >= {final_steps}:
            break
    if last and done >= {final_steps}:
        break
print("CHECKSUM", checksum(), flush=True)
"""


def starts(log: str) -> dict[int, tuple[int, int, str]]:
    """generation -> (epoch, step, checksum of the restored weights)."""
    return {int(g): (int(e), int(s), c) for g, e, s, c in re.findall(r"^START (\d+) (\d+) (\d+) (\S+)$", log, re.M)}


def global_step(worker: dict) -> int:
    return ((worker["epoch"] or 1) - 1) * STEPS + (worker["step"] or 0) if worker["epoch"] else 0


def test_kill_9s_in_a_row_each_resume_with_identical_weights_and_leave_nothing(kernel, run_root, tmp_path):
    rng = random.Random(SOAK_SEED)
    setup = kernel.run("s = nbworkers.settings(); s.restart_backoff = 0.1; s.restart_backoff_max = 0.2; "
                       "s.stop_grace = 1.0")
    assert not setup.error, setup.error
    name = "soak"
    cell = SOAK_CELL.format(name=name, restarts=KILLS, steps=STEPS, epochs=EPOCHS, kills=KILLS, final_steps=FINAL_STEPS,
                            checkpoint_dir=str(tmp_path / "ckpt-soak"))
    assert not kernel.run(cell).error
    started = time.monotonic()
    kills = []
    for generation in range(KILLS):
        ahead = rng.randint(1, 3)  # steps into this generation before the kill ...
        delay = round(rng.uniform(0.0, 0.6), 2)  # ... plus a random moment within the next steps
        victim = rng.choice([0, 1])

        def progressed() -> bool:
            snap = snapshot(kernel, name)
            assert snap["status"] not in ("finished", "failed", "stopped"), (kills, snap["status"], snap["error"])
            if snap["generation"] != generation or snap["workers"][victim]["pid"] is None:
                return False
            if generation == 0:
                return global_step(snap["workers"][victim]) >= ahead
            resumed = snap["restart_history"][-1]["resumed_from"]
            if resumed is None:
                return False
            base = (resumed["epoch"] - 1) * STEPS + resumed["step"]
            return global_step(snap["workers"][victim]) >= base + ahead

        assert wait_until(progressed, GENERATION_TIMEOUT, interval=0.1), (kills, snapshot(kernel, name))
        time.sleep(delay)
        snap = snapshot(kernel, name)
        pid = snap["workers"][victim]["pid"]
        assert snap["generation"] == generation and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE, (kills, snap)
        os.kill(pid, signal.SIGKILL)
        kills.append((generation, victim, ahead, delay, global_step(snap["workers"][victim])))
        assert wait_until(lambda: ended(pid), 10)
    waited = kernel.run(f"%workers wait {name} --timeout {WAIT_TIMEOUT}", timeout=WAIT_TIMEOUT + 30)
    snap = snapshot(kernel, name)
    elapsed = time.monotonic() - started
    print(f"soak: seed {SOAK_SEED}, kills (generation, worker, steps ahead, delay, global step) {kills}; "
          f"{elapsed:.0f} s after launch")
    assert snap["status"] == "finished", (snap["error"], waited.text[-2000:])
    assert snap["restarts"] == KILLS and [e["kind"] for e in snap["restart_history"]] == ["WorkerCrashed"] * KILLS
    logs = [worker_log(run_root, name, i) for i in (0, 1)]
    restored = [starts(log) for log in logs]
    assert sorted(restored[0]) == sorted(restored[1]) == list(range(KILLS + 1)), restored
    for generation in range(1, KILLS + 1):  # each resume: the same checkpoint, the same weights on both workers
        assert restored[0][generation] == restored[1][generation], (generation, restored)
        assert restored[0][generation][:2] >= restored[0][generation - 1][:2], restored  # never backwards
    assert_same_final_weights(run_root, name)
    assert wait_until(lambda: not processes_of_run_root(run_root), 15), processes_of_run_root(run_root)
