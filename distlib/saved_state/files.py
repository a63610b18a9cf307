"""Where a session's saved state lives and its private files (``<run dir>/session-state/gen-<g>/worker-<i>/``:
folders 0700, files 0600 opened with ``O_NOFOLLOW``; arrays without pickle). ``manifest.json`` is written last: a
folder without it is an incomplete save and is never read."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbworkers.protocol import env_settings, session_wire
from nbworkers.protocol.private.dirs import private_dir
from nbworkers.protocol.private.files import open_own

MANIFEST_FILE = "manifest.json"
VALUES_ARRAYS_FILE = "values.npz"
VALUES_JSON_FILE = "values.json"
CONTAINERS_FILE = "containers.json"  # the structure of tuples, lists and dicts of arrays (in values.npz)
GENERATION_DIR = re.compile(r"gen-([0-9]{1,9})")


def state_root(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / session_wire.STATE_DIR


def generation_dir(run_dir: str | os.PathLike, generation: int) -> Path:
    return state_root(run_dir) / f"gen-{generation}"


def worker_dir(run_dir: str | os.PathLike, generation: int, worker: int) -> Path:
    return generation_dir(run_dir, generation) / f"worker-{worker}"


def fresh_worker_dir(run_dir: str | os.PathLike, generation: int, worker: int) -> Path:
    """This worker's empty private folder for ``generation`` (older generations dropped: a restore reads the
    newest)."""
    root = state_root(run_dir)
    for name in (os.listdir(root) if root.is_dir() else []):
        match = GENERATION_DIR.fullmatch(name)
        if match and int(match.group(1)) < generation:
            shutil.rmtree(root / name, ignore_errors=True)
    private_dir(root)
    private_dir(generation_dir(run_dir, generation))
    folder = worker_dir(run_dir, generation, worker)
    if folder.exists():
        shutil.rmtree(folder)
    private_dir(folder)
    return folder


def latest_saved(run_dir: str | os.PathLike, before: int) -> int | None:
    """The newest generation, older than ``before``, that a worker finished saving (its manifest is there)."""
    try:
        names = os.listdir(state_root(run_dir))
    except OSError:
        return None
    found = [int(m.group(1)) for m in map(GENERATION_DIR.fullmatch, names) if m]
    complete = [g for g in found if g < before and any((generation_dir(run_dir, g) / n / MANIFEST_FILE).is_file()
                                                       for n in _worker_names(generation_dir(run_dir, g)))]
    return max(complete) if complete else None


def _worker_names(folder: Path) -> list[str]:
    try:
        return [n for n in os.listdir(folder) if re.fullmatch(r"worker-[0-9]{1,6}", n)]
    except OSError:
        return []


def write_bytes(path: Path, data: bytes) -> None:
    fd = open_own(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(data)


def write_json(path: Path, value: Any) -> None:
    write_bytes(path, json.dumps(value).encode("utf-8"))


def read_json(path: Path) -> Any:
    with os.fdopen(open_own(path), "rb") as file:
        return json.loads(file.read())


def write_arrays(path: Path, arrays: Mapping[str, Any]) -> None:
    import numpy as np

    fd = open_own(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), 0o600)
        np.savez(file, allow_pickle=False, **{k: np.asarray(v) for k, v in arrays.items()})


def read_arrays(path: Path) -> dict[str, Any]:
    import numpy as np

    with os.fdopen(open_own(path), "rb") as file:
        with np.load(file, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}


def holder_dir(run_dir: str | os.PathLike, generation: int) -> Path:
    """The folder of the worker that saved the trackables in ``generation`` (worker 0 unless it was gone: each
    manifest names it, ``holder``)."""
    folder = generation_dir(run_dir, generation)
    for name in sorted(_worker_names(folder)):
        holder = (read_manifest(folder / name) or {}).get("holder")
        if isinstance(holder, int) and holder >= 0:
            return worker_dir(run_dir, generation, holder)
    return worker_dir(run_dir, generation, 0)


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """A worker's finished save's manifest; None when there is none (not finished, or not on this machine)."""
    try:
        manifest = read_json(folder / MANIFEST_FILE)
    except FileNotFoundError:
        return None
    return manifest if isinstance(manifest, dict) else {}


def stays_on_node(folder: str) -> str:
    """Why a save on a Ray node that does not share the kernel's files cannot reach the other nodes (larger than
    the kernel copies back: ``NBWORKERS_SAVE_COPY_MAX_BYTES``); "" when it can, or the node shares them."""
    limit = env_settings.SAVE_COPY_MAX_BYTES.get()
    if not limit or not folder:
        return ""
    size = sum(entry.stat().st_size for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False))
    if size <= limit:
        return ""
    return (f"its save ({size / 2**20:.1f} MiB) stays on its Ray node ({os.uname().nodename}): it is more than the "
            f"{limit / 2**20:.1f} MiB a node that does not share the kernel's files sends back (setting "
            "RaySettings.saved_state_max_bytes); raise it, or use a directory every node mounts")
