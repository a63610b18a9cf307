"""A session's saved state across Ray nodes that do not see the kernel's files (no shared file system).

A session worker saves what its namespace holds into ``<run dir>/session-state/gen-<g>/worker-<i>/``
(``distlib/saved_state/``): TensorFlow checkpoint files, ``.npz`` arrays (no pickle) and JSON. On a node that does
not share the kernel's run directory (``host_actor.same_file``: the node writes into a private run directory of its
own), that folder is on the node only. So, as the node's log is:

- **back to the kernel**: when the worker's group is gone, before its actor is released, the kernel asks the actor
  for its worker's save of that generation (``read_worker_save``: this user's own regular files of that one folder,
  at most ``RaySettings.saved_state_max_bytes`` in all), checks what comes back as it would check anything another
  machine sends (``checked_answer``: that generation's, that worker's, within the cap, or nothing is kept) and keeps
  it in the run's private directory (``write_tree``, replacing that worker's folder and no other), where a node
  that shares the kernel's files reads them as the local backend does;
- **out to the new workers**: launching the next generation, the kernel sends each worker on a node that does not
  share its files the save that worker restores from (``files_for``: the holder's, whose checkpoints every worker
  reads, and the worker's own arrays and values), in the same start request that carries the cell; the node writes
  them into its run directory before the worker starts.

The files travel as opaque bytes through the Ray calls that already carry the cell, the pushed variables and the
log between the kernel and its actors (Ray's own channel; nothing of them is unpickled or run on the way: the
kernel reads only the manifests' JSON to find the holder; the worker reads the arrays with ``allow_pickle=False``).
Every path is checked against the save's layout (``gen-N/worker-M/FILE``: no ``..``, no folder of another name)
and written with ``O_NOFOLLOW`` into private folders (0700; files 0600).

Pure file handling: no Ray, no TensorFlow (the node's actor and the kernel both import it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbworkers.protocol import session_wire
from nbworkers.protocol.private.dirs import private_dir
from nbworkers.protocol.private.files import open_own, read_own

MANIFEST = "manifest.json"  # written last by the worker: a folder without it is an unfinished save
GENERATION = re.compile(r"gen-([0-9]{1,9})")
WORKER = re.compile(r"worker-([0-9]{1,6})")
FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")  # a saved name's files (Python names), values, manifest
MAX_FILES = 10_000  # in one worker's save

Files = dict[str, bytes]  # "gen-N/worker-M/FILE" -> its bytes


class StateCopyError(ValueError):
    """A save was not copied: larger than allowed, or a path outside the save's layout."""


def state_root(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / session_wire.STATE_DIR


def folder_name(generation: int, worker: int) -> str:
    return f"gen-{generation}/worker-{worker}"


def too_large(size: int, max_bytes: int) -> str:
    """The message of a save over the cap (the setting named)."""
    return (f"{size / 2**20:.1f} MiB, more than the {max_bytes / 2**20:.1f} MiB a Ray node that does not share the "
            "kernel's files sends back (setting RaySettings.saved_state_max_bytes)")


# ------------------------------------------------------------------------------------------ on the node
def read_worker_save(run_dir: str | os.PathLike, generation: int, worker: int, max_bytes: int) -> tuple[Files, str]:
    """This worker's finished save of ``generation`` in ``run_dir`` (the node's): its files, or none and why (over
    ``max_bytes``); none and "" when it saved nothing there (no manifest: no save, or not finished)."""
    folder = state_root(run_dir) / folder_name(generation, worker)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return {}, ""
    if MANIFEST not in names:
        return {}, ""
    names = [n for n in names if FILE.fullmatch(n)]
    if len(names) > MAX_FILES:
        return {}, f"{len(names)} files, more than {MAX_FILES}"
    size = sum((folder / n).lstat().st_size for n in names if (folder / n).is_file())
    if size > max_bytes:
        return {}, too_large(size, max_bytes)
    files: Files = {}
    for name in names:
        if (folder / name).is_symlink() or not (folder / name).is_file():
            continue  # only the save's own regular files travel
        files[f"{folder_name(generation, worker)}/{name}"] = read_own(folder / name)
    return files, ""


# ------------------------------------------------------------------------------------------ either side
def check_path(path: str) -> tuple[int, int, str]:
    """(generation, worker, file name) of a copied file's path; ``StateCopyError`` unless it is
    ``gen-N/worker-M/FILE`` exactly."""
    parts = path.split("/")
    if len(parts) != 3:
        raise StateCopyError(f"{path!r} is not gen-N/worker-M/FILE")
    gen, worker = GENERATION.fullmatch(parts[0]), WORKER.fullmatch(parts[1])
    if gen is None or worker is None or not FILE.fullmatch(parts[2]):
        raise StateCopyError(f"{path!r} is not gen-N/worker-M/FILE")
    return int(gen.group(1)), int(worker.group(1)), parts[2]


def write_tree(run_dir: str | os.PathLike, files: Mapping[str, bytes], replace: tuple[int, int] | None = None
               ) -> list[str]:
    """Write copied saves (``read_worker_save``'s or ``files_for``'s) under ``run_dir``'s ``session-state``; every
    path checked first (``StateCopyError``, nothing written). Each file is replaced at once (``_write``), manifests
    last: a folder is a save only once it is whole. ``replace``: the (generation, worker) whose folder is emptied
    first, the only folder the files may then be in (the kernel's copy back of one worker, while no worker reads
    it; not on a node, where a worker of the new group may read it while the next one's files are written). The
    folders written."""
    checked = [(check_path(path), data) for path, data in files.items()]
    if not all(isinstance(data, (bytes, bytearray, memoryview)) for _, data in checked):
        raise StateCopyError("a copied file is not bytes")
    if replace is not None:
        outside = sorted(f"gen-{g}/worker-{w}/{n}" for (g, w, n), _ in checked if (g, w) != replace)
        if outside:
            raise StateCopyError(f"{outside[0]!r} is not in {folder_name(*replace)}, the one folder being replaced")
    root = private_dir(state_root(run_dir))
    folders: dict[tuple[int, int], Path] = {}
    for (gen, worker, _), _ in checked:
        if (gen, worker) not in folders:
            private_dir(root / f"gen-{gen}")
            folder = root / folder_name(gen, worker)
            if (gen, worker) == replace and os.path.lexists(folder):
                shutil.rmtree(folder)
            folders[(gen, worker)] = private_dir(folder)
    for (gen, worker, name), data in sorted(checked, key=lambda item: item[0][2] == MANIFEST):
        _write(folders[(gen, worker)] / name, bytes(data))
    return [folder_name(g, w) for g, w in sorted(folders)]


def _write(path: Path, data: bytes) -> None:
    """``data`` at ``path`` at once (a worker reading it sees the old file or the new one, never half): a file
    of those bytes already there is left as it is."""
    try:
        if path.stat().st_size == len(data) and read_own(path) == data:
            return
    except OSError:
        pass
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = open_own(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(data)
    os.replace(temporary, path)


def drop_older(run_dir: str | os.PathLike, generation: int) -> None:
    """Remove the saves of generations before ``generation`` (a restore reads the newest)."""
    root = state_root(run_dir)
    for name in (os.listdir(root) if root.is_dir() else []):
        match = GENERATION.fullmatch(name)
        if match and int(match.group(1)) < generation:
            shutil.rmtree(root / name, ignore_errors=True)


# ------------------------------------------------------------------------------------------ in the kernel
def checked_answer(answer: Any, generation: int, worker: int, max_bytes: int) -> tuple[Files, str]:
    """What the kernel keeps of a node's answer to ``read_worker_save(run_dir, generation, worker, max_bytes)``
    (nothing of it trusted): its files when the answer is ``(files, why)`` as that function makes it and every file
    is that worker's of that generation (``gen-G/worker-W/FILE``), at most ``MAX_FILES`` of them and ``max_bytes``
    in all; else none, and why (for the worker's log)."""
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2 and isinstance(answer[0], dict)
            and isinstance(answer[1], str)):
        return {}, f"the node's answer is not (files, why) but {type(answer).__name__}: ignored"
    files, why = answer
    if why or not files:
        return {}, " ".join(why.split())[:500]  # the node's own reason, one line
    if len(files) > MAX_FILES:
        return {}, f"the node sent {len(files)} files, more than {MAX_FILES}: none kept"
    wanted = folder_name(generation, worker)
    for path, data in files.items():
        try:
            if not isinstance(path, str) or check_path(path)[:2] != (generation, worker):
                raise StateCopyError(f"{str(path)[:200]!r} is not in {wanted}")
        except StateCopyError as error:
            return {}, f"the node sent a file of another save ({error}): none kept"
        if not isinstance(data, (bytes, bytearray)):
            return {}, f"the node sent {path!r} as {type(data).__name__}, not bytes: none kept"
    size = sum(len(data) for data in files.values())
    if size > max_bytes:
        return {}, f"the node sent {too_large(size, max_bytes)}: none kept"
    return files, ""


def latest_saved(run_dir: str | os.PathLike, before: int) -> int | None:
    """The newest generation before ``before`` with a finished save of some worker."""
    root = state_root(run_dir)
    try:
        names = os.listdir(root)
    except OSError:
        return None
    found = sorted((int(m.group(1)) for m in map(GENERATION.fullmatch, names) if m), reverse=True)
    for gen in found:
        if gen < before and _workers(root / f"gen-{gen}"):
            return gen
    return None


def _workers(folder: Path) -> list[int]:
    """The workers with a finished save in a generation's folder."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in map(WORKER.fullmatch, names)
                  if m and (folder / m.group(0) / MANIFEST).is_file())


def holder(run_dir: str | os.PathLike, generation: int) -> int:
    """The worker whose save holds the generation's models and variables (its manifests' ``holder``; worker 0
    when none says)."""
    folder = state_root(run_dir) / f"gen-{generation}"
    for worker in _workers(folder):
        try:
            manifest = json.loads(read_own(folder / f"worker-{worker}" / MANIFEST))
        except (OSError, ValueError):
            continue
        found = manifest.get("holder") if isinstance(manifest, dict) else None
        if isinstance(found, int) and not isinstance(found, bool) and found >= 0:
            return found
    return 0


def files_for(run_dir: str | os.PathLike, generation: int, worker: int, max_bytes: int) -> tuple[Files, str]:
    """What a new worker of ``generation`` on a node without the kernel's files needs to restore: the newest
    earlier save's holder folder and the worker's own (``run_dir``: the kernel's). None and why when they are
    larger than ``max_bytes``; none and "" when there is no save."""
    saved = latest_saved(run_dir, generation)
    if saved is None:
        return {}, ""
    files: Files = {}
    for source in sorted({holder(run_dir, saved), worker}):
        found, why = read_worker_save(run_dir, saved, source, max_bytes)
        if why:
            return {}, f"worker {source}'s save is {why}"
        files.update(found)
    size = sum(len(data) for data in files.values())
    if size > max_bytes:
        return {}, f"the save is {too_large(size, max_bytes)}"
    return files, ""
