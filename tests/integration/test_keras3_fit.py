"""Keras 3's own ``model.fit`` / ``evaluate`` / ``predict`` under MultiWorkerMirroredStrategy (``compat/keras3/mwms``).

Real 2-worker CPU clusters through the worker bootstrap (as under ``%%worker``), a tiny model with fixed
initial weights, generated data, no shuffling, SGD (not Adam: Adam is scale-invariant and would hide a
gradient scaled by the number of workers). Four runs in all:

- Keras 3 on 2 workers with the tutorials' callbacks (BackupAndRestore, ModelCheckpoint through the
  tutorial's ``write_filepath``, TensorBoard, ReportCallback) and validation data; worker 1 is killed (-9)
  after the second epoch and the harness kills worker 0 (as the supervisor does);
- the same cell started again: BackupAndRestore resumes at the third epoch; then evaluate and predict;
- tf_keras ``model.fit`` on 2 workers (``TF_USE_LEGACY_KERAS=1``, the tutorial's alternative: ``tf.keras`` is
  ``tf_keras`` there, and its ``ReportCallback`` feeds the widget) and Keras 3 on 1 worker with the same global batch.
  (The multi-worker tutorial's own code on tf_keras runs in tutorials/02_keras_multi_worker.ipynb, test_tutorials.)

Tolerance: the per-epoch losses and validation losses of the three ways agree within ``LOSS_RTOL`` (1e-5,
relative). Measured here: Keras 3 and tf_keras on 2 workers agree to the last bit, the 1-worker run differs
by ~2e-7 (float32, another summation order across replicas). A real aggregation bug (a gradient or loss
scaled by the number of workers, one worker's data missing) moves the losses by 1e-2 or more.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from distlib_helpers import run_cluster  # noqa: E402

LOSS_RTOL = 1e-5
TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
EPOCHS = 4

CELL = """
import json, os, signal
import numpy as np
import tensorflow as tf
from nbworkers import distlib

LEGACY = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
if LEGACY:
    keras = tf.keras  # tf_keras
else:
    import keras

rng = np.random.RandomState(0)
features = rng.rand(512, 8).astype("float32")
labels = (features.sum(axis=1) > 4).astype("int64")
w_rng = np.random.RandomState(42)
initial = [w_rng.normal(0, 0.5, (8, 16)).astype("float32"), np.zeros(16, "float32"),
           w_rng.normal(0, 0.5, (16, 2)).astype("float32"), np.zeros(2, "float32")]
tf_config = json.loads(os.environ["TF_CONFIG"])
task_type, task_id = tf_config["task"]["type"], tf_config["task"]["index"]

# The tutorial's order: data first, then the strategy. One pass over the data per epoch, no shuffling:
# a run resumed at epoch 3 sees the same batches as an uninterrupted one.
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(64)
validation = tf.data.Dataset.from_tensor_slices((features[:128], labels[:128])).batch(64)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    model.set_weights(initial)
    model.compile(optimizer=keras.optimizers.SGD(0.2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])


# The tutorial's write_filepath: the chief writes the real path, the others a temporary directory.
def _is_chief(task_type, task_id):
    return task_type == "worker" and task_id == 0


def _get_temp_dir(dirpath, task_id):
    temp_dir = os.path.join(dirpath, "workertemp_" + str(task_id))
    tf.io.gfile.makedirs(temp_dir)
    return temp_dir


def write_filepath(filepath, task_type, task_id):
    dirpath, base = os.path.dirname(filepath), os.path.basename(filepath)
    if not _is_chief(task_type, task_id):
        dirpath = _get_temp_dir(dirpath, task_id)
    return os.path.join(dirpath, base)


def checksum(weights):
    return float(sum(np.abs(w).astype("float64").sum() for w in weights))


class EpochLogs(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print("RESULT", json.dumps({f"epoch{epoch}": {k: float(v) for k, v in logs.items()}}), flush=True)
        if os.environ.get("CRASH") == "1" and epoch == 1 and task_id == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # a lost machine, after the second epoch's backup


callbacks = [distlib.ReportCallback(), EpochLogs()]
if os.environ.get("TUTORIAL_CALLBACKS") == "1":
    callbacks = [
        keras.callbacks.BackupAndRestore(backup_dir="backup"),
        keras.callbacks.ModelCheckpoint(write_filepath("checkpoints/model.keras", task_type, task_id)),
        *callbacks,
    ]
    if TENSORBOARD:  # the package (an optional extra); without it Keras's TensorBoard callback cannot run
        callbacks.insert(2, keras.callbacks.TensorBoard(log_dir=write_filepath("logs/tensorboard", task_type, task_id)))
history = model.fit(dataset, epochs=EPOCHS, steps_per_epoch=8, validation_data=validation, callbacks=callbacks,
                    verbose=2)
print("RESULT", json.dumps({"epochs_run": history.epoch, "history": history.history,
                            "checksum": checksum(model.get_weights()), "keras": type(model).__module__}))
if os.environ.get("TUTORIAL_CALLBACKS") == "1":
    evaluation = model.evaluate(validation, return_dict=True, verbose=0)
    predictions = model.predict(features[:100], batch_size=32, verbose=0)
    direct = model(features[:100]).numpy()
    saved = keras.models.load_model(write_filepath("checkpoints/model.keras", task_type, task_id))
    print("RESULT", json.dumps({
        "evaluation": evaluation,
        "predict_shape": list(predictions.shape),
        "predict_max_error": float(np.abs(predictions - direct).max()),
        "checkpoint_checksum": checksum(saved.get_weights()),
        # where this worker's BackupAndRestore wrote (a non-chief: a private directory), and whether it is left
        "backup_private": [(c._nbworkers_private_dir.path, os.path.exists(c._nbworkers_private_dir.path))
                           for c in callbacks if hasattr(c, "_nbworkers_private_dir")],
    }))
    # steps_per_execution > 1 (a while_loop around a cond, where the gradients' all-reduce fails upstream):
    # a clear error before any collective.
    with strategy.scope():
        looped = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
        looped.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       steps_per_execution=4)
    try:
        looped.fit(dataset, epochs=1, steps_per_epoch=8, verbose=0)
    except ValueError as error:
        print("RESULT", json.dumps({"steps_per_execution_error": f"{type(error).__name__}: {error}"}))
"""


def per_epoch(run, worker: int) -> dict[int, dict[str, float]]:
    found = {}
    for item in run.results(worker):
        for key, value in item.items():
            if key.startswith("epoch") and key[5:].isdigit():
                found[int(key[5:])] = value
    return found


def assert_close(a: float, b: float, what: str) -> None:
    assert a == pytest.approx(b, rel=LOSS_RTOL), f"{what}: {a} vs {b} (rtol {LOSS_RTOL})"


@pytest.mark.timeout(600)
def test_keras3_model_fit_matches_tf_keras_and_one_worker_resumes_evaluates_predicts(tmp_path):
    keras3 = tmp_path / "keras3"
    env = {"TUTORIAL_CALLBACKS": "1"}
    cell = CELL.replace("EPOCHS", str(EPOCHS)).replace("TENSORBOARD", str(TENSORBOARD))

    # 1. Keras 3, 2 workers, the tutorials' callbacks; worker 1 dies after epoch 2, the harness kills worker 0.
    crashed = run_cluster(cell, keras3, env={**env, "CRASH": "1"},
                          kill_when=lambda run: all('"epoch1"' in out for out in run.outputs))
    assert crashed.returncodes[1] == -9, crashed.describe()
    assert sorted(per_epoch(crashed, 0)) == [0, 1], crashed.describe()

    # 2. Started again: BackupAndRestore resumes at the third epoch.
    resumed = run_cluster(cell, keras3, env=env)
    assert resumed.returncodes == [0, 0], resumed.describe()
    assert not resumed.startup_warnings()
    # model.fit(dataset) without shuffle: no Keras warning about a `shuffle=True` the cell never passed (compat/keras3/fit_guard)
    assert not [out for out in crashed.outputs + resumed.outputs if "`shuffle=True` was passed" in out], resumed.describe()
    results = [resumed.result(0), resumed.result(1)]
    for result in results:
        assert result["epochs_run"] == [2, 3], result  # 0-based: epochs 3 and 4
    keras3_epochs = {**per_epoch(crashed, 0), **per_epoch(resumed, 0)}
    assert per_epoch(resumed, 0) == per_epoch(resumed, 1)  # global metrics: the same logs on both workers
    assert per_epoch(crashed, 0) == per_epoch(crashed, 1)

    # Same weights on both workers; evaluate gives the same numbers on both; predict = the model's output.
    assert results[0]["checksum"] == results[1]["checksum"]
    assert results[0]["evaluation"] == results[1]["evaluation"]
    assert_close(results[0]["evaluation"]["loss"], keras3_epochs[3]["val_loss"], "evaluate vs the last val_loss")
    for result in results:
        assert result["predict_shape"] == [100, 2]
        assert result["predict_max_error"] < 1e-5, result
        assert result["checkpoint_checksum"] == pytest.approx(result["checksum"], rel=1e-6)  # ModelCheckpoint
    for result in results:
        assert result["steps_per_execution_error"].startswith("StepsPerExecutionUnderMultiWorkerError"), result
        assert "steps_per_execution=1" in result["steps_per_execution_error"]
    assert results[0]["backup_private"] == []  # the chief writes the real backup directory
    [(private, left)] = results[1]["backup_private"]  # worker 1 wrote a private one, removed at the end
    assert not private.startswith(str(keras3)) and not left, results[1]
    assert (keras3 / "checkpoints" / "model.keras").is_file()
    if TENSORBOARD:
        assert any((keras3 / "logs" / "tensorboard").rglob("*tfevents*"))  # TensorBoard wrote the chief's events
    assert not (keras3 / "backup").exists()  # BackupAndRestore deletes its backup at the end (the chief's)

    # The widget's metrics (ReportCallback): the same global values on both workers, = the History.
    for worker in (0, 1):
        final = [m for m in resumed.metrics(worker) if m["epoch"] == EPOCHS and m["step"] == 8][-1]
        assert final["metrics"] == pytest.approx(keras3_epochs[EPOCHS - 1]), final
        assert final["metrics"]["loss"] == results[worker]["history"]["loss"][-1]

    # 3. The same training with tf_keras on 2 workers, and with Keras 3 on 1 worker (same global batch).
    legacy = run_cluster(cell, tmp_path / "tf_keras", env={"TF_USE_LEGACY_KERAS": "1"})
    single = run_cluster(cell, tmp_path / "single", workers=1)
    assert legacy.returncodes == [0, 0], legacy.describe()
    assert single.returncodes == [0], single.describe()
    assert per_epoch(legacy, 0) == per_epoch(legacy, 1)
    for worker in (0, 1):  # TF_USE_LEGACY_KERAS=1 (`%%worker --env`): tf.keras is tf_keras; else Keras 3
        assert legacy.result(worker)["keras"].startswith("tf_keras"), legacy.result(worker)
        assert results[worker]["keras"].startswith("keras."), results[worker]
    for other, name in ((per_epoch(legacy, 0), "tf_keras, 2 workers"), (per_epoch(single, 0), "Keras 3, 1 worker")):
        assert sorted(other) == list(range(EPOCHS)), other
        for epoch in range(EPOCHS):
            for metric in ("loss", "val_loss"):
                assert_close(keras3_epochs[epoch][metric], other[epoch][metric], f"{name}, epoch {epoch + 1} {metric}")
    assert keras3_epochs[EPOCHS - 1]["loss"] < keras3_epochs[0]["loss"]  # it trained
    legacy_final = [m for m in legacy.metrics(0) if m["epoch"] == EPOCHS][-1]["metrics"]  # ReportCallback on tf_keras
    assert "loss" in legacy_final and legacy_final == [
        m for m in legacy.metrics(1) if m["epoch"] == EPOCHS][-1]["metrics"]
    print(json.dumps({"keras3": keras3_epochs, "tf_keras": per_epoch(legacy, 0), "one_worker": per_epoch(single, 0)}))
