"""A session's state kept across a restart of its processes (``%%worker --session``).

When one worker's error makes the kernel abort the others' collectives, they cannot be used again in those
processes, so the session restarts them. Reading a variable needs no collective (``benchmarks/notes.md``,
"Collectives after abort_collective_ops"), so before the restart the kernel sends ``save`` and each worker that
ended the cell writes what its namespace holds into ``<run dir>/session-state/gen-<generation>/worker-<i>/``
(``files``: a private folder; nothing is pickled). What is saved, as what: ``plan``.

- worker 0 only (under MultiWorkerMirroredStrategy every worker holds the same values): each trackable — a Keras
  model with its compiled optimizer, a Keras optimizer on its own, a variable, a ``tf.Module``, a
  ``tf.train.Checkpoint``, a Keras metric, or a tuple, list or dict holding some (and arrays) — as a TensorFlow
  checkpoint ``<name>.index``/``<name>.data-*`` (``objects``), its arrays in ``<name>.npz``; with Keras 3 on JAX
  (``%%worker --framework jax``) by Keras' own saving instead (``keras_objects``: ``model.save_weights``);
- every worker, its own: numpy arrays and tuples, lists and dicts of them (``values.npz``, ``containers.json``)
  and JSON values (``values.json``), up to ``max_bytes`` in all (the trackables count too).

``manifest.json`` is written last. Its ``saved`` entries say, for each name, what was saved, the cell that last
bound it (``built_in``: the cell message names the cells to run again), and how to put it back.

After the restart, the new processes put the arrays and JSON values back by themselves
(``restore_values_after_restart``, before their first cell). Trackables need objects to load into: the user runs
the cells that build them again, then ``%workers restore NAME`` (``restore_session_state()`` on every worker) reads
worker 0's checkpoints into the objects of the same names in every worker's namespace; with
``NBWORKERS_RESTORE_ON_REBUILD`` (the default), each is read as soon as a cell binds its name again (``rebuild``).

TensorFlow and Keras are never imported here: a value is a model or a variable only when the module that
defines its class is already loaded (``loaded_kinds``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from nbworkers.distlib.saved_state import files, keras_objects
from nbworkers.distlib.saved_state import objects as saved_objects
from nbworkers.distlib.saved_state.files import latest_saved
from nbworkers.distlib.saved_state.plan import (
    TRACKABLE_KINDS,
    Kinds,
    NotSaved,
    SavePlan,
    a_type,
    flatten,
    kind_of,
    nbytes,
    plan_save,
    same_shape,
    too_large,
    unflatten,
)
from nbworkers.protocol import env_settings, session_wire

__all__ = ["Kinds", "SavePlan", "kind_of", "plan_save", "latest_saved", "loaded_kinds", "save_namespace",
           "restore_values_after_restart", "restore_session_state", "NoSavedState", "StateNotRestored"]

TF_KINDS = TRACKABLE_KINDS
KERAS_FORMAT = "keras"  # a manifest record's "format": written by keras_objects (Keras' saving), else TensorFlow's
MAX_DETAIL_CHARS = 200


class NoSavedState(LookupError):
    """Nothing was saved for this session (it saves only when its processes restart after an error)."""


class StateNotRestored(RuntimeError):
    """Some saved names could not be put back; the message says which and what to do."""


def loaded_kinds() -> Kinds:
    """The kinds from the modules this process already imported (none: nothing of TensorFlow to save)."""
    return Kinds(*saved_objects.loaded_classes())


# ------------------------------------------------------------------------------------------- save
def save_namespace(namespace: Mapping[str, Any], run_dir: str | os.PathLike, generation: int, worker: int,
                   max_bytes: int, kinds: Kinds | None = None,
                   built_in: Mapping[str, int] | None = None, holder: int = 0) -> dict[str, Any]:
    """Save what ``plan_save`` picks into this worker's folder; the ``saved`` report (``session_wire``): saved
    [{name, kind, detail, cell}], skipped [{name, why}] (a name that failed to save is skipped with its error),
    dir. ``built_in``: name -> the cell that last bound it; ``holder``: the worker that saves the trackables
    (worker 0 unless it is gone)."""
    kinds = loaded_kinds() if kinds is None else kinds
    plan = plan_save(namespace, kinds, worker, max_bytes, holder)
    folder = files.fresh_worker_dir(run_dir, generation, worker)
    budget = max_bytes - sum(nbytes(namespace[n], k, kinds) for n, k in plan.entries if k not in TF_KINDS)
    saved: list[dict[str, Any]] = []
    skipped = [{"name": n, "why": w} for n, w in plan.skipped]
    arrays: dict[str, Any] = {}
    containers: dict[str, Any] = {}
    values: dict[str, Any] = {}
    records: dict[str, dict[str, Any]] = {}
    for name, kind in plan.entries:
        value = namespace[name]
        try:
            if kind == "value":
                values[name], detail = value, type(value).__name__
            elif kind == "array":
                detail = _add_arrays(name, value, kinds, arrays, containers)
            else:
                records[name], detail, size = _write_trackable(name, value, kinds, folder, namespace)
                if size > budget:
                    for path in _store(records[name]).files_of(str(folder / name)) + [str(folder / f"{name}.npz")]:
                        Path(path).unlink(missing_ok=True)
                    skipped.append({"name": name, "why": too_large(size, max_bytes)})
                    continue
                budget -= size
        except Exception as error:
            skipped.append({"name": name, "why": f"could not be saved: {type(error).__name__}: {error}"[:500]})
            continue
        entry: dict[str, Any] = {"name": name, "kind": kind, "detail": detail[:MAX_DETAIL_CHARS]}
        if built_in and name in built_in:
            entry["cell"] = int(built_in[name])
        saved.append(entry)
    if arrays:
        files.write_arrays(folder / files.VALUES_ARRAYS_FILE, arrays)
    if containers:
        files.write_json(folder / files.CONTAINERS_FILE, containers)
    if values:
        files.write_json(folder / files.VALUES_JSON_FILE, values)
    manifest = {"saved": [{**e, **records.get(e["name"], {})} for e in saved], "skipped": skipped,
                "dir": str(folder), "worker": worker, "holder": holder, "generation": generation,
                "t": time.time()}
    files.write_json(folder / files.MANIFEST_FILE, manifest)  # last: the save is complete
    limit = session_wire.MAX_SAVED_ENTRIES
    return {"saved": saved[:limit], "skipped": skipped[:limit], "dir": str(folder)}


def _add_arrays(name: str, value: Any, kinds: Kinds, arrays: dict[str, Any], containers: dict[str, Any]) -> str:
    """An array (``values.npz[name]``) or a container of arrays and JSON scalars (``values.npz[name.leaf<i>]``,
    its structure in ``containers.json``); what was saved."""
    flat = flatten(value, kinds)
    if flat.structure == {"leaf": 0}:
        arrays[name] = value
        return saved_objects.describe_arrays({name: value})
    scalars = {}
    for index, (kind, leaf) in enumerate(flat.leaves):
        if kind == "array":
            arrays[f"{name}.leaf{index}"] = leaf
        else:
            scalars[str(index)] = leaf
    containers[name] = {"structure": flat.structure, "scalars": scalars}
    return f"{a_type(value)} of {len(flat.leaves)}"


def _write_trackable(name: str, value: Any, kinds: Kinds, folder: Path,
                     namespace: Mapping[str, Any]) -> tuple[dict[str, Any], str, int]:
    """Write one name's trackables as a TensorFlow checkpoint (its arrays in ``<name>.npz``): the manifest's
    record of it (structure, scalars, which leaves are trackables, how its optimizers were built), what was
    written, and its size on disk."""
    flat = flatten(value, kinds)
    trackables = {f"leaf{i}": (k, leaf) for i, (k, leaf) in enumerate(flat.leaves) if k in TF_KINDS}
    leaf_arrays = {f"leaf{i}": leaf for i, (k, leaf) in enumerate(flat.leaves) if k == "array"}
    scalars = {str(i): leaf for i, (k, leaf) in enumerate(flat.leaves) if k == "scalar"}
    record = {"structure": flat.structure, "scalars": scalars, "trackables": sorted(trackables),
              "builds": saved_objects.build_plan(trackables, namespace)}
    if keras_objects.applies():  # Keras 3 on JAX (or torch): Keras' own saving, not TensorFlow's checkpoints
        record["format"] = KERAS_FORMAT
    detail = _store(record).write(trackables, str(folder / name))
    if flat.structure != {"leaf": 0}:
        detail = f"{a_type(value)} of {len(flat.leaves)}: {detail}"
    written = _store(record).files_of(str(folder / name))
    if leaf_arrays:
        files.write_arrays(folder / f"{name}.npz", leaf_arrays)
        written.append(str(folder / f"{name}.npz"))
    return record, detail, sum(os.path.getsize(p) for p in written)


def _store(record: Mapping[str, Any]) -> Any:
    """The module that writes and reads a name's objects: Keras' own saving (Keras 3 on JAX) or TensorFlow's."""
    return keras_objects if record.get("format") == KERAS_FORMAT else saved_objects


# ------------------------------------------------------------------------------------------- restore
def restore_values_after_restart(namespace: MutableMapping[str, Any], run_dir: str, generation: int,
                                 worker: int) -> list[str]:
    """In new processes right after a save (the previous generation's): put this worker's arrays and JSON values
    back. The names restored (logged); nothing when the restart was not preceded by a save."""
    folder = files.worker_dir(run_dir, generation - 1, worker)
    if not run_dir or not (folder / files.MANIFEST_FILE).is_file():
        return []
    names = _restore_values(namespace, folder)
    if names:
        print(f"nbworkers: put back {', '.join(names)} (saved before the session's processes restarted)",
              file=sys.stderr, flush=True)
    return names


def _restore_values(namespace: MutableMapping[str, Any], folder: Path) -> list[str]:
    names: list[str] = []
    containers = files.read_json(folder / files.CONTAINERS_FILE) if (folder / files.CONTAINERS_FILE).is_file() else {}
    if (folder / files.VALUES_ARRAYS_FILE).is_file():
        arrays = files.read_arrays(folder / files.VALUES_ARRAYS_FILE)
        for name, array in arrays.items():
            if "." not in name:
                namespace[name] = array[()] if array.ndim == 0 else array
                names.append(name)
        for name, spec in containers.items():
            leaves = _leaves(spec, {k.split(".", 1)[1]: a for k, a in arrays.items() if k.startswith(name + ".")})
            namespace[name] = unflatten(spec["structure"], leaves)
            names.append(name)
    if (folder / files.VALUES_JSON_FILE).is_file():
        values = files.read_json(folder / files.VALUES_JSON_FILE)
        namespace.update(values)
        names += list(values)
    return names


def _leaves(record: Mapping[str, Any], arrays: Mapping[str, Any], objects: list[Any] | None = None) -> list[Any]:
    """A saved container's leaves in order: its arrays (``leaf<i>``), its scalars, else ``objects``' own."""
    count = _count_leaves(record["structure"])
    leaves: list[Any] = list(objects) if objects is not None else [None] * count
    for index in range(count):
        if f"leaf{index}" in arrays:
            array = arrays[f"leaf{index}"]
            leaves[index] = array[()] if array.ndim == 0 else array
        elif str(index) in record.get("scalars", {}):
            leaves[index] = record["scalars"][str(index)]
    return leaves


def _count_leaves(structure: Any) -> int:
    if "leaf" in structure:
        return 1
    if "dict" in structure:
        return sum(_count_leaves(part) for _, part in structure["dict"])
    return sum(_count_leaves(part) for part in structure.get("list", structure.get("tuple", [])))


def restore_session_state(names: Iterable[str] | None = None,
                          namespace: MutableMapping[str, Any] | None = None) -> dict[str, str]:
    """Put back what the session saved before its processes last restarted (``%workers restore NAME`` runs this
    on every worker): models with their optimizers, optimizers, variables and other trackables into the objects of
    the same names (worker 0's checkpoints), this worker's arrays and JSON values by name. ``names``: only those.
    Run the cells that build the models and optimizers first. Returns name -> what was restored; raises
    ``NoSavedState`` when nothing was saved, ``StateNotRestored`` naming what could not be put back."""
    namespace = sys.modules["__main__"].__dict__ if namespace is None else namespace
    run_dir = env_settings.RUN_DIR.get()
    generation = int(os.environ.get(env_settings.GENERATION.name, "0"))
    worker = int(os.environ.get(env_settings.WORKER.name, "0"))
    saved_generation = latest_saved(run_dir, generation) if run_dir else None
    if saved_generation is None:
        raise NoSavedState("this session saved no state: it saves its models, variables and values only when its "
                           "processes restart after one worker's error (`%workers` says when it did)")
    source = files.holder_dir(run_dir, saved_generation)
    own = files.worker_dir(run_dir, saved_generation, worker)
    manifest = files.read_manifest(source)
    wanted = set(names) if names is not None else None
    restored: dict[str, str] = {}
    problems: dict[str, str] = {}  # name -> why it was not restored
    if manifest is None:
        holder = source.name.replace("-", " ")  # worker 0, or the one that saved in its place
        problems[f"{holder}'s models and variables"] = (
            f"not readable here ({source / files.MANIFEST_FILE} is missing): {holder} did not finish saving, or (on "
            "--backend ray) its save stayed on its node, larger than RaySettings.saved_state_max_bytes (its log says);"
            " the cells that built and trained them must run again")
        manifest = {}
    kinds = loaded_kinds()
    for entry in manifest.get("saved", []):
        name, kind = entry["name"], entry["kind"]
        if kind not in TF_KINDS or (wanted is not None and name not in wanted):
            continue
        if name not in namespace:
            problems[name] = f"({kind}) not in this namespace: run the cell that builds it, then restore"
            continue
        try:
            restored[name] = _restore_trackable(entry, namespace, source, kinds)
        except Exception as error:
            problems[name] = f"({kind}) {type(error).__name__}: {error}"
    if (own / files.MANIFEST_FILE).is_file():
        values: dict[str, Any] = {}
        for name in _restore_values(values, own):
            if wanted is None or name in wanted:
                namespace[name] = values[name]
                restored[name] = "value"
    for name in sorted((wanted or set()) - set(restored) - set(problems)):
        problems[name] = "was not saved"
    print(f"{session_wire.RESTORED}{', '.join(f'{n} ({d})' for n, d in restored.items()) or 'nothing'} "
          f"(saved in {files.generation_dir(run_dir, saved_generation)})", flush=True)
    if problems:
        raise StateNotRestored("not restored:\n  " + "\n  ".join(f"{n}: {why}" for n, why in problems.items()))
    return restored


def _restore_trackable(entry: Mapping[str, Any], namespace: MutableMapping[str, Any], source: Path,
                       kinds: Kinds) -> str:
    """Read one name's checkpoint into the rebuilt object(s) of that name; its arrays and scalars put in place."""
    name = entry["name"]
    try:
        flat = flatten(namespace[name], kinds)
    except NotSaved as why:
        raise ValueError(f"here it is {why}, not what was saved: build it as the cell that made the saved one did")
    if not same_shape(entry["structure"], flat.structure):
        raise ValueError(f"here it is {a_type(namespace[name])} of another shape than the saved one: build "
                         "it as the cell that made the saved one did")
    leaves = {}
    for key in entry["trackables"]:
        kind, obj = flat.leaves[int(key[len("leaf"):])]
        if kind not in TF_KINDS:
            raise ValueError(f"here its {key} is {a_type(obj)}, saved was a {entry['kind']}: build it as "
                             "the cell that made the saved one did")
        leaves[key] = (kind, obj)
    text = _store(entry).read(leaves, str(source / name), entry.get("builds", {}), namespace)
    if flat.structure != {"leaf": 0} and (entry.get("scalars") or (source / f"{name}.npz").is_file()):
        arrays = files.read_arrays(source / f"{name}.npz") if (source / f"{name}.npz").is_file() else {}
        namespace[name] = unflatten(entry["structure"], _leaves(entry, arrays, [obj for _, obj in flat.leaves]))
    return text
