"""``distlib.fit`` for Keras 3 on JAX (``%%worker --framework jax``): Keras' own ``model.fit``, which trains across the
processes under the ``DataParallel`` distribution the worker's bootstrap set, with a ``ReportCallback`` added and,
with ``checkpoint_dir``, Keras' own ``BackupAndRestore`` in one folder per process:
``<checkpoint_dir>/process-<jax.process_index()>``.

One folder each because every process takes part in Keras' save (its ``save_weights`` makes a throwaway optimizer,
whose variables a multi-process distribution places with a collective: a process saving alone would wait for the
others) and two processes writing one ``.weights.h5`` collide on its file lock. A restarted group resumes at the
epoch after its last backup (Keras 3 records the batch but resumes by epoch); the backups are kept after training,
as ``distlib.fit``'s are for TensorFlow. There is no save on SIGTERM (TensorFlow's preemption handler) here. Before
the fit, a process whose backup is an epoch ahead of a peer's (killed while they saved) rolls back to its previous
one (``double_checkpoint``), so that every process resumes from the same epoch (``compat/keras3/backup``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from nbworkers.distlib.compat.keras3 import backup as keras3_backup
from nbworkers.distlib.reporting import ReportCallback


def applies(model: Any) -> bool:
    """A Keras 3 model on a backend other than TensorFlow (its strategies and checkpoints do not apply)."""
    keras = sys.modules.get("keras")
    model_class = getattr(keras, "Model", None)
    if not isinstance(model_class, type) or not isinstance(model, model_class):
        return False
    try:
        return keras.backend.backend() != "tensorflow"  # type: ignore[union-attr]
    except Exception:
        return False


def backup_dir(checkpoint_dir: str) -> str:
    """This process's backup folder under ``checkpoint_dir``."""
    index = 0
    if "jax" in sys.modules:
        index = sys.modules["jax"].process_index()
    return os.path.join(str(checkpoint_dir), f"process-{index}")


def _start_from_a_common_epoch(backup: Any, folder: str, checkpoint_dir: str) -> None:
    """Every process resumes from the same epoch (``compat/keras3/backup``); this process's folder exists from now
    on, so that a peer restarting later knows it has no backup yet rather than one elsewhere."""
    os.makedirs(folder, exist_ok=True)
    paths = keras3_backup.files(backup)
    processes = sys.modules["jax"].process_count() if "jax" in sys.modules else 1
    if paths is None or processes < 2:
        return
    folders = [os.path.join(checkpoint_dir, f"process-{index}") for index in range(processes)]
    done = keras3_backup.roll_back_to_common(paths, folder, folders)
    if done:
        print(f"nbworkers: {done}", file=sys.stderr, flush=True)


def fit(model: Any, data: Any, *, epochs: int, steps_per_epoch: int | None, callbacks: list | None,
        initial_epoch: int, verbose: int, report: bool, checkpoint_dir: str | None) -> Any:
    """``model.fit`` with reporting and, with ``checkpoint_dir``, a backup per process (see the module's docstring)."""
    import keras

    callbacks = list(callbacks or [])
    if report and not any(isinstance(c, ReportCallback) for c in callbacks):
        callbacks.append(ReportCallback())
    if checkpoint_dir is not None and not any(isinstance(c, keras.callbacks.BackupAndRestore) for c in callbacks):
        folder = backup_dir(checkpoint_dir)
        backup = keras.callbacks.BackupAndRestore(folder, double_checkpoint=True, delete_checkpoint=False)
        _start_from_a_common_epoch(backup, folder, str(checkpoint_dir))
        callbacks.append(backup)
    return model.fit(data, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks,
                     initial_epoch=initial_epoch, verbose=verbose)
