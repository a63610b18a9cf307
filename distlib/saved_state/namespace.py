"""A session's state kept across a restart of its processes (``%%worker --session``).

When one worker's error makes the kernel abort the others' collectives, they cannot be used again in those
processes, so the session restarts them. Reading a variable needs no collective (``benchmarks/notes.md``,
"Collectives after abort_collective_ops"), so before the restart the kernel sends ``save`` and each worker that
ended the cell writes what its namespace holds into ``<run dir>/session-state/gen-<generation>/worker-<i>/``
(a private folder: 0700, files 0600 opened with ``O_NOFOLLOW``; nothing is pickled):

- worker 0 only (under MultiWorkerMirroredStrategy every worker holds the same values): each Keras model's
  weights and optimizer variables (``<name>.npz``), each ``tf.Variable`` / ``keras.Variable`` (``<name>.npz``),
  each other ``tf.Module`` or ``tf.train.Checkpoint`` (``tf.train.Checkpoint(root=obj).write``);
- every worker, its own: numpy arrays (``values.npz``) and JSON values (``values.json``), up to ``max_bytes``.

``manifest.json`` is written last: a folder without it is an incomplete save and is never read.

After the restart, the new processes put the arrays and JSON values back by themselves
(``restore_values_after_restart``, before their first cell). Models, variables and checkpointed objects need
objects to load into: the user runs the cells that build them again, then ``%workers restore NAME`` (a session
cell calling ``restore_session_state()``), which assigns the saved values into the objects of the same names
in every worker's namespace (worker 0's copy on every worker).

TensorFlow and Keras are never imported here: a value is a model or a variable only when the module that
defines its class is already loaded (``loaded_kinds``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import types
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbworkers.distlib.saved_state import objects as saved_objects
from nbworkers.protocol import env_settings, session_wire
from nbworkers.protocol.private.dirs import private_dir
from nbworkers.protocol.private.files import open_own

MANIFEST_FILE = "manifest.json"
VALUES_ARRAYS_FILE = "values.npz"
VALUES_JSON_FILE = "values.json"
TF_KINDS = ("model", "variable", "checkpoint")  # saved by worker 0 only, restored on every worker
GENERATION_DIR = re.compile(r"gen-([0-9]{1,9})")
MAX_DETAIL_CHARS = 200


class NoSavedState(LookupError):
    """Nothing was saved for this session (it saves only when its processes restart after an error)."""


class StateNotRestored(RuntimeError):
    """Some saved names could not be put back; the message says which and what to do."""


@dataclass(frozen=True)
class Kinds:
    """The classes that make a value a model, a variable or a checkpointable object (TensorFlow's and Keras',
    as far as they are loaded: ``loaded_kinds``; plain classes in unit tests)."""

    models: tuple[type, ...] = ()
    variables: tuple[type, ...] = ()
    checkpointables: tuple[type, ...] = ()


@dataclass
class SavePlan:
    """What a save writes: (name, kind) in namespace order, and the names left out with why."""

    entries: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def loaded_kinds() -> Kinds:
    """The kinds from the modules this process already imported (none: nothing of TensorFlow to save)."""
    return Kinds(*saved_objects.loaded_classes())


def kind_of(value: Any, kinds: Kinds) -> str | None:
    """``model``, ``variable``, ``checkpoint``, ``array``, ``value`` (JSON), or None (not saved)."""
    if kinds.models and isinstance(value, kinds.models):
        return "model"
    if kinds.variables and isinstance(value, kinds.variables):
        return "variable"
    if kinds.checkpointables and isinstance(value, kinds.checkpointables):
        return "checkpoint"
    if _is_plain_array(value):
        return "array"
    if _is_json_value(value):
        return "value"
    return None


def plan_save(namespace: Mapping[str, Any], kinds: Kinds, worker: int, max_bytes: int) -> SavePlan:
    """The names of ``namespace`` to save: public names only; modules, functions and classes are code (the cells
    make them again); TF objects on worker 0 only; arrays and JSON values while they fit in ``max_bytes``."""
    plan = SavePlan()
    budget = max_bytes
    for name, value in list(namespace.items()):
        if name.startswith("_") or not name.isidentifier() or _is_code(value):
            continue
        kind = kind_of(value, kinds)
        if kind is None:
            plan.skipped.append((name, f"a {type(value).__name__}"))  # not a kind nbworkers saves
        elif kind in TF_KINDS and worker != 0:
            continue  # worker 0's copy is restored on every worker
        elif kind in ("array", "value"):
            size = _nbytes(value, kind)
            if size > budget:
                plan.skipped.append((name, f"too large: {size / 2**20:.1f} MiB, past the "
                                           f"{max_bytes / 2**20:.0f} MiB saved at most"))
            else:
                budget -= size
                plan.entries.append((name, kind))
        else:
            plan.entries.append((name, kind))
    return plan


# ------------------------------------------------------------------------------------------- where
def state_root(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / session_wire.STATE_DIR


def generation_dir(run_dir: str | os.PathLike, generation: int) -> Path:
    return state_root(run_dir) / f"gen-{generation}"


def worker_dir(run_dir: str | os.PathLike, generation: int, worker: int) -> Path:
    return generation_dir(run_dir, generation) / f"worker-{worker}"


def latest_saved(run_dir: str | os.PathLike, before: int) -> int | None:
    """The newest generation, older than ``before``, that a worker finished saving (its manifest is there)."""
    root = state_root(run_dir)
    try:
        names = os.listdir(root)
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


# ------------------------------------------------------------------------------------------- save
def save_namespace(namespace: Mapping[str, Any], run_dir: str | os.PathLike, generation: int, worker: int,
                   max_bytes: int, kinds: Kinds | None = None) -> dict[str, Any]:
    """Save what ``plan_save`` picks into this worker's folder; the ``saved`` report (``session_wire``): saved
    [{name, kind, detail}], skipped [{name, why}] (a name that failed to save is skipped with its error), dir."""
    kinds = loaded_kinds() if kinds is None else kinds
    plan = plan_save(namespace, kinds, worker, max_bytes)
    _drop_older(run_dir, generation)
    private_dir(state_root(run_dir))
    private_dir(generation_dir(run_dir, generation))
    folder = worker_dir(run_dir, generation, worker)
    if folder.exists():
        shutil.rmtree(folder)
    private_dir(folder)
    saved: list[dict[str, str]] = []
    skipped = [{"name": n, "why": w} for n, w in plan.skipped]
    arrays: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for name, kind in plan.entries:
        value = namespace[name]
        try:
            if kind == "array":
                arrays[name], detail = value, _array_detail(value)
            elif kind == "value":
                values[name], detail = value, type(value).__name__
            elif kind == "checkpoint":
                detail = saved_objects.write_checkpoint(value, str(folder / name))
            else:
                detail = _write_arrays(folder / f"{name}.npz", saved_objects.arrays_of(value, kind))
        except Exception as error:
            skipped.append({"name": name, "why": f"could not be saved: {type(error).__name__}: {error}"[:500]})
            continue
        saved.append({"name": name, "kind": kind, "detail": detail[:MAX_DETAIL_CHARS]})
    if arrays:
        _write_arrays(folder / VALUES_ARRAYS_FILE, arrays)
    if values:
        _write_bytes(folder / VALUES_JSON_FILE, json.dumps(values).encode("utf-8"))
    report = {"saved": saved, "skipped": skipped, "dir": str(folder), "worker": worker, "generation": generation,
              "t": time.time()}
    _write_bytes(folder / MANIFEST_FILE, json.dumps(report).encode("utf-8"))  # last: the save is complete
    limit = session_wire.MAX_SAVED_ENTRIES
    return {"saved": saved[:limit], "skipped": skipped[:limit], "dir": str(folder)}


def _drop_older(run_dir: str | os.PathLike, generation: int) -> None:
    """Only the newest save is kept (a restore reads the newest one)."""
    root = state_root(run_dir)
    for name in (os.listdir(root) if root.is_dir() else []):
        match = GENERATION_DIR.fullmatch(name)
        if match and int(match.group(1)) < generation:
            shutil.rmtree(root / name, ignore_errors=True)


def _write_bytes(path: Path, data: bytes) -> None:
    fd = open_own(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(data)


def _write_arrays(path: Path, arrays: Mapping[str, Any]) -> str:
    import numpy as np

    fd = open_own(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), 0o600)
        np.savez(file, allow_pickle=False, **{k: np.asarray(v) for k, v in arrays.items()})
    return saved_objects.describe(arrays)


def _read_arrays(path: Path) -> dict[str, Any]:
    import numpy as np

    with os.fdopen(open_own(path), "rb") as file:
        with np.load(file, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}


# ------------------------------------------------------------------------------------------- restore
def restore_values_after_restart(namespace: MutableMapping[str, Any], run_dir: str, generation: int,
                                 worker: int) -> list[str]:
    """In new processes right after a save (the previous generation's): put this worker's arrays and JSON values
    back. The names restored (logged); nothing when the restart was not preceded by a save."""
    folder = worker_dir(run_dir, generation - 1, worker)
    if not run_dir or not (folder / MANIFEST_FILE).is_file():
        return []
    names = _restore_values(namespace, folder)
    if names:
        print(f"nbworkers: put back {', '.join(names)} (saved before the session's processes restarted)",
              file=sys.stderr, flush=True)
    return names


def _restore_values(namespace: MutableMapping[str, Any], folder: Path) -> list[str]:
    names: list[str] = []
    if (folder / VALUES_ARRAYS_FILE).is_file():
        for name, array in _read_arrays(folder / VALUES_ARRAYS_FILE).items():
            namespace[name] = array[()] if array.ndim == 0 else array
            names.append(name)
    if (folder / VALUES_JSON_FILE).is_file():
        with os.fdopen(open_own(folder / VALUES_JSON_FILE), "rb") as file:
            values = json.loads(file.read())
        namespace.update(values)
        names += list(values)
    return names


def restore_session_state(names: Iterable[str] | None = None,
                          namespace: MutableMapping[str, Any] | None = None) -> dict[str, str]:
    """Put back what the session saved before its processes last restarted (``%workers restore NAME`` runs this
    on every worker): models' weights and optimizer variables, variables and checkpointed objects into the objects
    of the same names (worker 0's values), this worker's arrays and JSON values by name. ``names``: only those.
    Run the cells that build the models and variables first. Returns name -> what was restored; raises
    ``NoSavedState`` when nothing was saved, ``StateNotRestored`` naming what could not be put back."""
    namespace = sys.modules["__main__"].__dict__ if namespace is None else namespace
    run_dir = env_settings.RUN_DIR.get()
    generation = int(os.environ.get(env_settings.GENERATION.name, "0"))
    worker = int(os.environ.get(env_settings.WORKER.name, "0"))
    saved_generation = latest_saved(run_dir, generation) if run_dir else None
    if saved_generation is None:
        raise NoSavedState("this session saved no state: it saves its models, variables and values only when its "
                           "processes restart after one worker's error (`%workers` says when it did)")
    source = worker_dir(run_dir, saved_generation, 0)
    own = worker_dir(run_dir, saved_generation, worker)
    manifest = _read_manifest(source)
    wanted = set(names) if names is not None else None
    restored: dict[str, str] = {}
    problems: dict[str, str] = {}  # name -> why it was not restored
    if manifest is None:
        problems["worker 0's models and variables"] = (
            f"not readable here ({source / MANIFEST_FILE} is missing): worker 0 did not finish saving, or (on "
            "--backend ray) saved them on its own node; the cells that built and trained them must run again")
        manifest = {}
    for entry in manifest.get("saved", []):
        name, kind = entry["name"], entry["kind"]
        if kind not in TF_KINDS or (wanted is not None and name not in wanted):
            continue
        if name not in namespace:
            problems[name] = f"({kind}) not in this namespace: run the cell that builds it, then restore"
            continue
        try:
            if kind == "checkpoint":
                saved_objects.read_checkpoint(namespace[name], str(source / name))
                restored[name] = "checkpoint read"
            else:
                arrays = _read_arrays(source / f"{name}.npz")
                restored[name] = saved_objects.assign_arrays(namespace[name], kind, arrays)
        except Exception as error:
            problems[name] = f"({kind}) {type(error).__name__}: {error}"
    if (own / MANIFEST_FILE).is_file():
        values: dict[str, Any] = {}
        for name in _restore_values(values, own):
            if wanted is None or name in wanted:
                namespace[name] = values[name]
                restored[name] = "value"
    for name in sorted((wanted or set()) - set(restored) - set(problems)):
        problems[name] = "was not saved"
    print(f"nbworkers: restored {', '.join(f'{n} ({d})' for n, d in restored.items()) or 'nothing'} "
          f"(saved in {generation_dir(run_dir, saved_generation)})", flush=True)
    if problems:
        raise StateNotRestored("not restored:\n  " + "\n  ".join(f"{n}: {why}" for n, why in problems.items()))
    return restored


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    """A worker's finished save's manifest; None when there is none (not finished, or not on this machine)."""
    try:
        with os.fdopen(open_own(folder / MANIFEST_FILE), "rb") as file:
            manifest = json.loads(file.read())
    except FileNotFoundError:
        return None
    return manifest if isinstance(manifest, dict) else {}


# ------------------------------------------------------------------------------------------- plain values
def _is_code(value: Any) -> bool:
    return isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                              type))


def _is_plain_array(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(value, (numpy.ndarray, numpy.generic)):
        return False
    return not numpy.asarray(value).dtype.hasobject


def _is_json_value(value: Any) -> bool:
    """A value that JSON gives back equal (numbers, strings, None, bools, lists and str-keyed dicts of them)."""
    if not isinstance(value, (bool, int, float, str, list, dict, type(None))):
        return False
    try:
        return bool(json.loads(json.dumps(value, allow_nan=False)) == value)
    except (TypeError, ValueError, RecursionError):
        return False


def _nbytes(value: Any, kind: str) -> int:
    if kind == "array":
        return int(value.nbytes)
    return len(json.dumps(value))


def _array_detail(value: Any) -> str:
    return f"{value.dtype} {tuple(value.shape)}" if value.shape else str(value.dtype)
