"""Keras 3's ``BackupAndRestore`` files, for a JAX run whose processes keep one backup folder each
(``distlib/keras_fit_jax.py``): they must resume from the same epoch.

Every process saves at the same step (its callbacks run after the same all-reduced step), but a process killed while
the processes save leaves its backup an epoch behind the others'; each would then resume from its own epoch, with
other weights than its peers (JAX refuses them, or the fits run different step counts and one waits forever). So
before the fit, a process whose backup is ahead of the oldest one rolls back to its previous backup (Keras keeps it
with ``double_checkpoint=True``), or drops its backup when some process has none yet.

The files' paths are the callback's private attributes (``_weights_path``, ``_training_metadata_path`` and their
``_prev_`` ones; no upstream issue, no public accessor). Group ``keras3/backup`` in ``internals``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from typing import Any

from nbworkers.distlib.compat import internals

NO_BACKUP = -1  # the epoch of a folder without a backup yet


class BackupsDisagree(RuntimeError):
    """The processes' backups cannot be brought to one epoch; the message says what to do."""


def files(callback: Any) -> dict[str, str] | None:
    """The callback's weights / metadata paths (``prev_``: the previous backup's), or None when Keras moved them."""
    if not internals.available("keras3/backup", "a JAX run's processes may resume from different epochs"):
        return None
    return {"weights": callback._weights_path, "metadata": callback._training_metadata_path,
            "prev_weights": callback._prev_weights_path, "prev_metadata": callback._prev_training_metadata_path}


def epoch_of(metadata_path: str) -> int:
    """The epochs a backup's metadata says were done (``NO_BACKUP`` without one)."""
    try:
        with open(metadata_path) as saved:
            return int(json.load(saved)["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return NO_BACKUP


def roll_back_to_common(paths: dict[str, str], own_folder: str, folders: Sequence[str]) -> str:
    """Bring this process's backup (``paths`` in ``own_folder``) to the oldest epoch of every process's ``folders``
    (``own_folder`` among them); what was done ("" when nothing). Nothing when a peer's folder is not visible here
    (another machine's disk). ``BackupsDisagree`` when this process's previous backup is not that epoch either."""
    if not all(os.path.isdir(folder) for folder in folders):
        return ""
    name = os.path.relpath(paths["metadata"], own_folder)
    epochs = [epoch_of(os.path.join(folder, name)) for folder in folders]
    target, own = min(epochs), epoch_of(paths["metadata"])
    if own == target:
        return ""
    if target == NO_BACKUP:
        for key in ("weights", "metadata", "prev_weights", "prev_metadata"):
            if os.path.exists(paths[key]):
                os.remove(paths[key])
        return f"dropped this process's backup (epoch {own}): a peer has none yet"
    if epoch_of(paths["prev_metadata"]) == target and os.path.isfile(paths["prev_weights"]):
        shutil.copyfile(paths["prev_weights"], paths["weights"])
        shutil.copyfile(paths["prev_metadata"], paths["metadata"])
        return f"rolled this process's backup back from epoch {own} to {target}, where every process has one"
    raise BackupsDisagree(f"the processes' backups are at epochs {epochs}, and this one's previous backup is not at "
                          f"epoch {target}: delete {os.path.dirname(own_folder)} to train from the start")
