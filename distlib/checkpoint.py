"""``TrainingCheckpoint``: the custom-loop tutorial's fault-tolerance pattern in one object.

It tracks the epoch and the step inside the epoch next to the user's objects (model, optimizer, ...).
Every worker saves (saving runs collectives under MultiWorkerMirroredStrategy); the chief writes the real
checkpoint directory, the others write private temporary directories that are removed after each save. On
start, ``restore_or_initialize()`` loads the latest checkpoint from the real directory (shared by the
workers: same machine or a shared filesystem, checked on creation: ``shared_dir.py``), so a restarted cluster
resumes where it saved::

    ckpt = distlib.TrainingCheckpoint(checkpoint_dir, model=model, optimizer=optimizer)
    ckpt.restore_or_initialize()
    for epoch in ckpt.epochs(num_epochs):           # starts at the saved epoch
        for step in ckpt.steps(steps_per_epoch):    # starts at the saved step of that epoch
            train_step(iterator)
        ckpt.save()
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any, Iterator

from nbworkers.distlib.cluster import TaskInfo, task
from nbworkers.distlib.dirs import write_dir
from nbworkers.distlib.shared_dir import check_shared
from nbworkers.distlib.worker import preemption


class TrainingCheckpoint:
    """Checkpoint of ``trackables`` plus ``epoch`` / ``step_in_epoch`` counters (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike, max_to_keep: int = 1, info: TaskInfo | None = None,
                 **trackables: Any):
        import tensorflow as tf

        if not trackables:
            raise ValueError("TrainingCheckpoint needs something to save, e.g. TrainingCheckpoint(dir, model=model).")
        reserved = {"epoch", "step_in_epoch"} & set(trackables)
        if reserved:
            raise ValueError(f"{', '.join(sorted(reserved))} are tracked by TrainingCheckpoint itself; rename yours.")
        self.directory = os.fspath(directory)
        self.info = info or task()
        check_shared(self.directory, self.info)  # fail now, not at the first restart, when a worker cannot see it
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.step_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_in_epoch")
        self.checkpoint = tf.train.Checkpoint(epoch=self.epoch, step_in_epoch=self.step_in_epoch, **trackables)
        self._target = write_dir(self.directory, self.info)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory=self._target.path, max_to_keep=max_to_keep)
        self.restored_from: str | None = None

    def restore_or_initialize(self) -> tuple[int, int]:
        """Load the latest checkpoint of the real directory if there is one; return (epoch, step_in_epoch)."""
        import tensorflow as tf

        latest = tf.train.latest_checkpoint(self.directory)
        if latest:
            self.checkpoint.restore(latest)
            self.restored_from = latest
        return int(self.epoch.numpy()), int(self.step_in_epoch.numpy())

    def epochs(self, num_epochs: int) -> Iterator[int]:
        """Epoch numbers from the saved one to ``num_epochs - 1``; moves the counters on after each."""
        while int(self.epoch.numpy()) < num_epochs:
            current = int(self.epoch.numpy())
            yield current
            self.epoch.assign(current + 1)
            self.step_in_epoch.assign(0)

    def steps(self, steps_per_epoch: int) -> Iterator[int]:
        """Step numbers of the current epoch from the saved one. The counter moves before each step runs,
        so a ``save()`` inside the step records it as done.

        While it runs, SIGTERM to a worker (preemption) makes every worker ``save()`` after the same step and
        exit with code 42 (``distlib.preemption``); the restarted run continues after that step. Every
        worker must go through the same steps (as synchronous training does anyway)."""
        with preemption.training(self._save_for_preemption) as guard:
            while int(self.step_in_epoch.numpy()) < steps_per_epoch:
                current = int(self.step_in_epoch.numpy())
                self.step_in_epoch.assign(current + 1)
                yield current
                guard.step_done()

    def _save_for_preemption(self) -> None:
        path = self.save()
        print(f"nbworkers: preemption checkpoint at epoch {int(self.epoch.numpy())}, step"
              f" {int(self.step_in_epoch.numpy())}: {path or '(non-chief)'}", file=sys.stderr, flush=True)

    def save(self) -> str | None:
        """Save on every worker; only the chief's copy is kept. Returns the chief's checkpoint path."""
        path = self.manager.save()
        if self._target.is_private:
            shutil.rmtree(self._target.path, ignore_errors=True)
            return None
        return path
