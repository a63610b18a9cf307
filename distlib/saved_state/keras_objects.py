"""Keras 3 objects on a backend other than TensorFlow (JAX: ``%%worker --framework jax``) written and read with Keras'
own saving, for a session's saved state (``namespace``): the counterpart of ``objects`` (TensorFlow's checkpoints,
which take no Keras-on-JAX object). Nothing is pickled.

One saved name is ``<name>.leaf<i>.weights.h5`` per Keras model (``model.save_weights``: its layers' weights and its
compiled optimizer's iterations and slots, Keras' own format) and ``<name>.leaf<i>.npz`` per optimizer, metric or
variable (the arrays of Keras' own ``save_own_variables``; a metric's variables; a variable's value), read back with
``load_weights`` / ``load_own_variables`` / ``assign`` into the objects the rebuilt cells made.

Across processes (a ``DataParallel`` distribution over every process's devices) every variable is replicated: the
saving worker reads its own replica, and the save needs no other process (the others may be gone or blocked). One
thing in Keras' saving does: ``get_attr_skipset("Optimizer")`` makes a throwaway ``Optimizer`` each time (its cache
is written under another key than it is read, Keras 3.15), whose variables a multi-process distribution places with
a collective (``device_put``'s check that every process holds the same value): one process saving alone would wait
for the others forever. So the save runs with no distribution set (``keras.distribution.set_distribution(None)``,
public), which places those throwaway variables on this process alone. The restore runs on every worker together
(``%workers restore`` or a rebuild cell, on every worker at once): assigning a distributed variable is that same
collective, and every worker reads the same files.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from nbworkers.distlib.saved_state import objects as tf_objects

MODEL_SUFFIX = ".weights.h5"  # Keras' weights file (model.save_weights requires this ending)
ARRAYS_SUFFIX = ".npz"


def applies() -> bool:
    """Keras 3 is loaded on a backend whose objects TensorFlow cannot checkpoint (JAX, torch)."""
    keras = sys.modules.get("keras")
    backend = getattr(getattr(keras, "backend", None), "backend", None)
    try:
        return callable(backend) and backend() not in ("tensorflow", "")
    except Exception:  # a Keras without its backend module loaded yet
        return False


@contextmanager
def _on_this_process() -> Iterator[None]:
    """No Keras distribution while saving: variables Keras' saving makes for itself stay on this process."""
    import keras

    distribution = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(distribution)


def _local(value: Any) -> np.ndarray:
    """This process's copy of a (replicated) Keras variable or array, as numpy."""
    value = getattr(value, "value", value)  # a Keras variable's backend array
    if getattr(value, "is_fully_addressable", True) or getattr(value, "is_fully_replicated", False):
        return np.asarray(value)  # a replicated global array: JAX reads this process's copy
    return np.asarray(value.addressable_shards[0].data)


def _path(prefix: str, key: str, kind: str) -> str:
    return f"{prefix}.{key}{MODEL_SUFFIX if kind == 'model' else ARRAYS_SUFFIX}"


def files_of(prefix: str) -> list[str]:
    """The files of a ``write`` at ``prefix`` (``<prefix>.leaf<i>.weights.h5`` / ``.npz``)."""
    folder, stem = os.path.split(prefix)
    return sorted(os.path.join(folder, n) for n in os.listdir(folder)
                  if n.startswith(stem + ".leaf") and n.endswith((MODEL_SUFFIX, ARRAYS_SUFFIX)))


def write(leaves: Mapping[str, tuple[str, Any]], prefix: str) -> str:
    """Write ``leaves`` (key -> (kind, object)) with Keras' own saving (files 0600); what was written."""
    count = 0
    with _on_this_process():
        for key, (kind, obj) in leaves.items():
            path = _path(prefix, key, kind)
            if kind == "model":
                obj.save_weights(path)
                count += len(obj.weights) + len(_variables(getattr(obj, "optimizer", None)))
            else:
                arrays = _own_variables(obj)
                with open(path, "wb") as out:
                    np.savez(out, **arrays)  # type: ignore[arg-type]  # numpy's stub: allow_pickle is positional
                count += len(arrays)
            os.chmod(path, 0o600)
    size = sum(os.path.getsize(p) for p in files_of(prefix))
    return tf_objects._describe([(kind, obj) for kind, obj in leaves.values()], count, size)


def _own_variables(obj: Any) -> dict[str, np.ndarray]:
    """A variable's value (``value``), or what Keras' ``save_own_variables`` stores (an optimizer, a metric)."""
    if hasattr(obj, "save_own_variables"):
        store: dict[str, Any] = {}
        obj.save_own_variables(store)
    elif isinstance(getattr(obj, "variables", None), (list, tuple)):  # a Keras 3 metric: its variables
        store = {str(i): v for i, v in enumerate(obj.variables)}
    else:
        store = {"value": obj}
    arrays = {name: _local(value) for name, value in store.items()}
    odd = [name for name, array in arrays.items() if array.dtype.hasobject]
    if odd:  # np.savez would pickle them
        raise TypeError(f"{type(obj).__name__}'s {', '.join(odd)} is not an array of numbers")
    return arrays


def read(leaves: Mapping[str, tuple[str, Any]], prefix: str, builds: Mapping[str, str],
         namespace: Mapping[str, Any]) -> str:
    """Read a ``write`` into the rebuilt ``leaves`` (their optimizers built first, as ``builds`` says: Keras loads
    an optimizer's slots only once it has them); raises when one does not match what was saved."""
    for key, owner in builds.items():
        if key in leaves:
            tf_objects._build_optimizer(leaves[key][1], owner, namespace)
    for key, (kind, obj) in leaves.items():
        path = _path(prefix, key, kind)
        if kind == "model":
            optimizer = getattr(obj, "optimizer", None)
            if optimizer is not None and not optimizer.built and os.path.isfile(path):
                optimizer.build(obj.trainable_variables)  # as Keras' BackupAndRestore does before load_weights
            obj.load_weights(path)
            continue
        with np.load(path, allow_pickle=False) as saved:
            arrays = {name: saved[name] for name in saved.files}
        if "value" in arrays:
            obj.assign(arrays["value"])
            continue
        own = list(obj.variables)
        if len(own) != len(arrays):  # Keras' load_own_variables would only warn and skip them
            raise ValueError(f"{type(obj).__name__} has {len(own)} variables here, {len(arrays)} were saved: build "
                             "it as the cell that made the saved one did (an optimizer: for the same variables), then "
                             "restore")
        if hasattr(obj, "load_own_variables"):
            obj.load_own_variables(arrays)
        else:
            for index, variable in enumerate(own):
                variable.assign(arrays[str(index)])
    return tf_objects._restored([(kind, obj) for kind, obj in leaves.values()])


def _variables(optimizer: Any) -> list[Any]:
    return [] if optimizer is None else list(getattr(optimizer, "variables", []))
