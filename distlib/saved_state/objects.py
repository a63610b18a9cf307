"""Trackables written and read with TensorFlow's own checkpointing, for a session's saved state
(``distlib/saved_state/namespace.py``). Nothing here needs a collective: writing reads this process's copy of each
(mirrored) variable, reading assigns each local copy in cross-replica context.

One saved name is one ``tf.train.Checkpoint`` whose children are the name's trackable leaves (``leaf<i>``: the
object itself, or the leaves of a tuple, list or dict holding it). A Keras 3 metric is not trackable: its
``variables`` are saved instead. A model is saved with its compiled optimizer (its iterations and slots), a Keras
optimizer on its own with its iterations, learning rate and slots.

An optimizer's slots exist once it was built (its first ``apply_gradients``); a rebuilt optimizer has none yet. So
the save records what each built optimizer was built for (``build_plan``: a model's own trainable variables, or
the namespace name whose ``trainable_variables`` a standalone one holds: ``compat/keras3/optimizer``), and the
restore builds the rebuilt optimizer the same way under its strategy before reading, so its iterations and slots
are back at once. One whose variables are not rebuilt yet is not read (TensorFlow would restore slots created
later, but not those a traced step creates): the restore says which cell to run first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

from nbworkers.distlib.compat.keras3 import optimizer as keras3_optimizer

OWN = ""  # build_plan: a model's compiled optimizer, built for the model's own trainable variables
UNKNOWN = "?"  # build_plan: a standalone optimizer built for variables no one namespace name holds


def loaded_classes() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """(models, variables, checkpointables, holders): the classes of the Keras and TensorFlow modules imported."""
    models: list[type] = []
    variables: list[type] = []
    checkpointables: list[type] = []
    holders: list[type] = []
    for module_name in ("keras", "tf_keras"):
        keras = sys.modules.get(module_name)
        layers = getattr(keras, "layers", None)
        for cls in (getattr(keras, "Model", None), getattr(layers, "Layer", None)):
            if isinstance(cls, type):
                models.append(cls)
        if isinstance(getattr(keras, "Variable", None), type):
            variables.append(keras.Variable)  # type: ignore[union-attr]  # Keras 3's own variable
        optimizer = getattr(getattr(keras, "optimizers", None), "Optimizer", None)
        if isinstance(optimizer, type):
            checkpointables.append(optimizer)
        metric = getattr(getattr(keras, "metrics", None), "Metric", None)
        if isinstance(metric, type):
            holders.append(metric)  # Keras 3's is not trackable (tf_keras's is a Layer: a model above)
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(getattr(tf, "Variable", None), type):
        variables.append(tf.Variable)
        checkpointables += [cls for cls in (getattr(tf, "Module", None), getattr(getattr(tf, "train", None),
                                                                                  "Checkpoint", None))
                            if isinstance(cls, type)]
    return tuple(models), tuple(variables), tuple(checkpointables), tuple(holders)


def build_plan(leaves: Mapping[str, tuple[str, Any]], namespace: Mapping[str, Any]) -> dict[str, str]:
    """leaf key -> how its optimizer was built: ``OWN`` (a model's compiled optimizer, built), the namespace
    name whose ``trainable_variables`` a built standalone optimizer's slots are for, or ``UNKNOWN``."""
    plan: dict[str, str] = {}
    for key, (kind, obj) in leaves.items():
        if kind == "model":
            if _is_built(getattr(obj, "optimizer", None)):
                plan[key] = OWN
            continue
        if type(obj).__module__.startswith("keras.") and not keras3_optimizer.check():  # warned once: a symbol gone
            continue
        built_for = keras3_optimizer.built_for(obj)
        if not built_for:
            continue
        wanted = [id(v) for v in built_for]
        plan[key] = next((name for name, value in namespace.items()
                          if value is not obj and [id(v) for v in _trainable(value)] == wanted), UNKNOWN)
    return plan


def owners(builds: Mapping[str, str]) -> set[str]:
    """The namespace names a saved object's optimizers need before it can be restored (``build_plan``'s)."""
    return {owner for owner in builds.values() if owner not in (OWN, UNKNOWN)}


def write(leaves: Mapping[str, tuple[str, Any]], prefix: str) -> str:
    """Write ``leaves`` (key -> (kind, object)) as one checkpoint at ``prefix`` (files 0600); what was written
    (the cell's note shows it)."""
    count = checkpoint_write({key: _checkpointable(obj) for key, (_, obj) in leaves.items()}, prefix)
    size = 0
    for path in files_of(prefix):
        os.chmod(path, 0o600)
        size += os.path.getsize(path)
    return _describe([(kind, obj) for kind, obj in leaves.values()], count, size)


def files_of(prefix: str) -> list[str]:
    """The files of the checkpoint at ``prefix`` (``<prefix>.index``, ``<prefix>.data-*``)."""
    folder, stem = os.path.split(prefix)
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(stem + "."))


def read(leaves: Mapping[str, tuple[str, Any]], prefix: str, builds: Mapping[str, str],
         namespace: Mapping[str, Any]) -> str:
    """Read a ``write`` into the rebuilt ``leaves`` (optimizers built first, as ``builds`` says); raises when an
    object of the rebuilt ones has no saved value (it was built differently). What was restored."""
    for key, owner in builds.items():
        if key in leaves:
            _build_optimizer(leaves[key][1], owner, namespace)
    checkpoint_read({key: _checkpointable(obj) for key, (_, obj) in leaves.items()}, prefix)
    return _restored([(kind, obj) for kind, obj in leaves.values()])


def checkpoint_write(objects: Mapping[str, Any], prefix: str) -> int:
    """``tf.train.Checkpoint(**objects).write(prefix)``: the number of values written."""
    import tensorflow as tf

    path = tf.train.Checkpoint(**objects).write(prefix)
    return max(0, len(tf.train.list_variables(path)) - 1)  # less the object graph


def checkpoint_read(objects: Mapping[str, Any], prefix: str) -> None:
    """``tf.train.Checkpoint(**objects).read(prefix)``; raises when one of ``objects``' variables has no saved
    value (values saved for objects not created yet are put in when they are: an optimizer's next slots)."""
    import tensorflow as tf

    tf.train.Checkpoint(**objects).read(prefix).assert_existing_objects_matched()


def _build_optimizer(obj: Any, owner: str, namespace: Mapping[str, Any]) -> None:
    """Build a rebuilt optimizer's slots for what the saved one had them for, under its strategy. ValueError when
    that is not here: TensorFlow would put the saved slots into slots created later, but not into those a traced
    step creates (its first ``apply_gradients`` in a ``tf.function``), so they would be lost."""
    optimizer = getattr(obj, "optimizer", None) if owner == OWN else obj
    if optimizer is None or _is_built(optimizer) or not hasattr(optimizer, "build"):
        return
    source = obj if owner == OWN else namespace.get(owner)
    if source is None:
        made = ("variables that no one name holds" if owner == UNKNOWN
                else f"{owner}'s variables, and {owner} is not in this namespace")
        raise ValueError(f"its saved slots are for {made}: run the cell that builds "
                         f"{'them' if owner == UNKNOWN else owner} (or call its build(variables)), then restore")
    strategy = getattr(obj, "distribute_strategy", None) if owner == OWN else keras3_optimizer.strategy_of(optimizer)
    with strategy.scope() if strategy is not None else nullcontext():
        optimizer.build(list(_trainable(source)))


def _checkpointable(obj: Any) -> Any:
    """What TensorFlow checkpoints for ``obj``: itself, or a Keras 3 metric's variables (it is not trackable)."""
    metric: Any = getattr(getattr(sys.modules.get("keras"), "metrics", None), "Metric", None)
    is_metric = isinstance(metric, type) and isinstance(obj, metric)
    return list(obj.variables) if is_metric else obj


def _trainable(value: Any) -> list[Any]:
    try:
        variables = getattr(value, "trainable_variables", None)
        return list(variables) if isinstance(variables, (list, tuple)) else []
    except Exception:  # a property that fails on an object not built yet
        return []


def _is_built(optimizer: Any) -> bool:
    """Has the optimizer made its slots: Keras 3's ``built``; tf_keras's has more variables than its iterations."""
    if optimizer is None:
        return False
    built = getattr(optimizer, "built", None)
    return built if isinstance(built, bool) else len(_variables(optimizer)) > 1


def _describe(leaves: list[tuple[str, Any]], count: int, size: int) -> str:
    """"4 weights + 10 optimizer variables, 0.1 MiB", "Adam: 10 variables (iterations 1979), 0.1 MiB",
    "float32 (8, 16)", "a tuple of 3: 14 variables, 0.2 MiB"."""
    mib = f"{size / 2**20:.1f} MiB"
    if len(leaves) != 1:
        return f"{len(leaves)} objects: {count} variables, {mib}"
    kind, obj = leaves[0]
    if kind == "variable":
        return f"{getattr(obj.dtype, 'name', obj.dtype)} {tuple(obj.shape)}"
    if kind == "model":
        optimizer = getattr(obj, "optimizer", None)
        slots = len(_variables(optimizer)) if optimizer is not None else 0
        return f"{len(obj.weights)} weights" + (f" + {slots} optimizer variables" if slots else "") + f", {mib}"
    counted = _iterations(obj)
    try:
        count = len(_variables(obj))  # its own (an optimizer's checkpoint also holds the model's, for its slots)
    except Exception:
        pass
    return f"{type(obj).__name__}: {count} variable{'' if count == 1 else 's'}{counted}, {mib}"


def _restored(leaves: list[tuple[str, Any]]) -> str:
    if len(leaves) != 1:
        return f"{len(leaves)} objects read"
    kind, obj = leaves[0]
    if kind == "model":
        optimizer = getattr(obj, "optimizer", None)
        slots = len(_variables(optimizer)) if optimizer is not None else 0
        return f"{len(obj.weights)} weights" + (f" + {slots} optimizer variables" if slots else "")
    if kind == "variable":
        return "variable assigned"
    iterations: Any = getattr(obj, "iterations", None)  # an optimizer: how far it was ("Adam, 21 steps taken")
    return f"{type(obj).__name__}, {int(iterations.numpy())} steps taken" if hasattr(iterations, "numpy") else (
        f"{type(obj).__name__} read")


def _iterations(obj: Any) -> str:
    """" (iterations 1979)" for an optimizer, "" for anything else."""
    iterations: Any = getattr(obj, "iterations", None)
    return f" (iterations {int(iterations.numpy())})" if hasattr(iterations, "numpy") else ""


def _variables(optimizer: Any) -> list[Any]:
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def describe_arrays(arrays: Mapping[str, Any]) -> str:
    """"float32 (8, 16)" for one array, "3 arrays, 0.1 MiB" for a container's."""
    if len(arrays) == 1:
        value = next(iter(arrays.values()))
        return f"{value.dtype} {tuple(value.shape)}" if value.shape else str(value.dtype)
    return f"{len(arrays)} arrays, {sum(int(a.nbytes) for a in arrays.values()) / 2**20:.1f} MiB"
