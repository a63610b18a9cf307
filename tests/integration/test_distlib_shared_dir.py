"""The checkpoint directory's check before training (distlib/shared_dir.py) on a real 2-worker CPU cluster.

A directory both workers see (this machine's disk) passes and leaves no probe behind. ``ram://`` (TensorFlow's
in-memory file system, private to each process) stands for a directory the other machines cannot see: every
worker fails at once, before training, saying which worker cannot read it and what to use instead.
"""

from __future__ import annotations

from distlib_helpers import run_cluster

CELL = """
import json, os
import tensorflow as tf
from nbworkers import distlib

strategy = distlib.strategy()
with strategy.scope():
    step = tf.Variable(0)
shared = distlib.TrainingCheckpoint(os.environ["SHARED_DIR"], step=step)
print("RESULT", json.dumps({"shared_ok": True, "left": sorted(os.listdir(os.environ["SHARED_DIR"]))}))
try:
    distlib.TrainingCheckpoint("ram://checkpoints", step=step)
except distlib.CheckpointDirNotShared as error:
    print("RESULT", json.dumps({"not_shared": str(error)}))
"""


def test_a_checkpoint_directory_only_one_worker_sees_fails_before_training_on_every_worker(tmp_path):
    shared = tmp_path / "shared"
    run = run_cluster(CELL, tmp_path, env={"SHARED_DIR": str(shared)})
    assert run.returncodes == [0, 0], run.describe()
    assert list(shared.iterdir()) == []  # the probe was removed
    for worker in (0, 1):
        result = run.result(worker)
        # the chief removes the probe before it returns (worker 1 may list the folder a moment before that)
        assert result["shared_ok"] and (result["left"] == [] or worker == 1), result
        message = result["not_shared"]
        assert "ram://checkpoints is not shared" in message and "worker 1 (on " in message, message
        assert "gs://" in message and "mounts" in message, message
