"""A JAX run's processes resume from the same epoch (distlib/compat/keras3/backup.py): a process whose Keras backup
is ahead of a peer's (killed while they saved) rolls back to its previous backup; one with a backup drops it when a
peer has none; nothing changes when they agree or when a peer's folder is on another machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbworkers.distlib.compat.keras3 import backup as keras3_backup


def backup(folder: Path, epoch: int | None, prev: int | None = None) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"weights": folder / "latest.weights.h5", "metadata": folder / "training_metadata.json",
             "prev_weights": folder / "latest.weights.h5.bkp", "prev_metadata": folder / "training_metadata.json.bkp"}
    for key, value in (("", epoch), ("prev_", prev)):
        if value is not None:
            paths[f"{key}weights"].write_text(f"weights of epoch {value}")
            paths[f"{key}metadata"].write_text(json.dumps({"epoch": value, "batch": 0}))
    return {key: str(path) for key, path in paths.items()}


def test_the_process_ahead_rolls_back_to_its_previous_backup(tmp_path):
    behind = backup(tmp_path / "process-0", 2, 1)
    ahead = backup(tmp_path / "process-1", 3, 2)
    folders = [str(tmp_path / "process-0"), str(tmp_path / "process-1")]
    assert keras3_backup.roll_back_to_common(behind, folders[0], folders) == ""
    done = keras3_backup.roll_back_to_common(ahead, folders[1], folders)
    assert "from epoch 3 to 2" in done
    assert keras3_backup.epoch_of(ahead["metadata"]) == 2
    assert Path(ahead["weights"]).read_text() == "weights of epoch 2"
    assert keras3_backup.roll_back_to_common(ahead, folders[1], folders) == ""  # now they agree


def test_a_backup_is_dropped_when_a_peer_has_none_and_kept_when_a_peer_is_elsewhere(tmp_path):
    mine = backup(tmp_path / "process-0", 1)
    backup(tmp_path / "process-1", None)  # its folder, no backup yet
    folders = [str(tmp_path / "process-0"), str(tmp_path / "process-1")]
    elsewhere = folders + [str(tmp_path / "process-2")]  # not on this disk: nothing is known
    assert keras3_backup.roll_back_to_common(mine, folders[0], elsewhere) == ""
    assert Path(mine["weights"]).exists()
    assert "a peer has none yet" in keras3_backup.roll_back_to_common(mine, folders[0], folders)
    assert not Path(mine["weights"]).exists() and keras3_backup.epoch_of(mine["metadata"]) == keras3_backup.NO_BACKUP


def test_backups_two_epochs_apart_say_what_to_do(tmp_path):
    behind = backup(tmp_path / "process-0", 1)
    ahead = backup(tmp_path / "process-1", 3, 2)
    folders = [str(tmp_path / "process-0"), str(tmp_path / "process-1")]
    with pytest.raises(keras3_backup.BackupsDisagree, match=r"epochs \[1, 3\].*delete .* to train from the start"):
        keras3_backup.roll_back_to_common(ahead, folders[1], folders)
    assert keras3_backup.roll_back_to_common(behind, folders[0], folders) == ""
