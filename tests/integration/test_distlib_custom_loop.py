"""The custom-training-loop tutorial's pattern on a real 2-worker CPU cluster, killed and restarted.

Run 1 trains epoch 0, saves, trains two steps of epoch 1, saves, then stalls; the test kills both worker
process groups there (as a crash would). Run 2 starts the same cell again and must resume at the saved epoch
and step, with the saved weights, not from zero.
"""

from __future__ import annotations

from cells import CUSTOM_LOOP_STEP  # noqa: E402
from distlib_helpers import run_cluster  # noqa: E402

CUSTOM_LOOP_CELL = """
import json, os, time
import numpy as np
from nbworkers import distlib
import tensorflow as tf
import keras

GLOBAL_BATCH, STEPS, EPOCHS = 32, 4, 3
CHECKPOINT_DIR = os.path.join(os.getcwd(), "checkpoints")


def emit(**values):
    print("RESULT", json.dumps(values), flush=True)


def checksum():
    return float(sum(np.abs(w.numpy()).astype("float64").sum() for w in model.weights))


""" + CUSTOM_LOOP_STEP + """


ckpt = distlib.TrainingCheckpoint(CHECKPOINT_DIR, model=model, optimizer=optimizer)
emit(start=list(ckpt.restore_or_initialize()), restored_checksum=checksum())
iterator = iter(dataset)
for epoch in ckpt.epochs(EPOCHS):
    for step in ckpt.steps(STEPS):
        loss = float(train_step(iterator))
        distlib.report(step=step + 1, epoch=epoch + 1, steps_total=STEPS, epochs_total=EPOCHS, loss=loss)
        emit(**{f"trained_{epoch}_{step}": loss})
        if os.environ.get("CRASH_MID_EPOCH") and epoch == 1 and step == 1:
            ckpt.save()
            emit(saved=[epoch, step + 1], saved_checksum=checksum(), private_dir_left=os.path.exists(ckpt._target.path))
            print("STALLING", flush=True)
            time.sleep(600)  # the test kills the cluster here
    ckpt.save()
    emit(saved=[epoch, STEPS], saved_checksum=checksum())
emit(done=True, final_epoch=int(ckpt.epoch.numpy()))
"""


def test_custom_loop_resumes_at_saved_epoch_and_step_after_a_kill(tmp_path):
    first = run_cluster(
        CUSTOM_LOOP_CELL,
        tmp_path,
        env={"CRASH_MID_EPOCH": "1"},
        kill_when=lambda run: all("STALLING" in output for output in run.outputs),
    )
    assert all("STALLING" in output for output in first.outputs), first.describe()
    saved = [first.result(worker) for worker in (0, 1)]
    for result in saved:
        assert result["start"] == [0, 0]
        assert result["saved"] == [1, 2], result
        assert "trained_0_3" in result and "trained_1_1" in result and "trained_1_2" not in result
    assert saved[0]["saved_checksum"] == saved[1]["saved_checksum"]
    assert saved[1]["private_dir_left"] is False  # the non-chief's private checkpoint dir is removed
    assert any(name.startswith("ckpt-") for name in (p.name for p in (tmp_path / "checkpoints").iterdir()))
    assert first.metrics(0) and first.metrics(1), first.describe()

    second = run_cluster(CUSTOM_LOOP_CELL, tmp_path)
    assert second.returncodes == [0, 0], second.describe()
    for worker in (0, 1):
        result = second.result(worker)
        assert result["start"] == [1, 2]  # the saved epoch and step, not zero
        assert result["restored_checksum"] == saved[worker]["saved_checksum"]
        trained = [key for key in (k for item in second.results(worker) for k in item) if key.startswith("trained_")]
        assert trained[0] == "trained_1_2" and trained[-1] == "trained_2_3", trained
        assert result["done"] and result["final_epoch"] == 3
        assert {m["epoch"] for m in second.metrics(worker)} <= {2, 3}  # reported positions continue too
