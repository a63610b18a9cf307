"""Models, variables and checkpointable objects as plain arrays and back, for a session's saved state
(``distlib/saved_state/namespace.py``). Public TensorFlow and Keras API only; nothing here needs a collective: reading a
(mirrored) variable reads this process's copy, and assigning one in cross-replica context writes each local copy.

A Keras model or layer is its ``weights`` (``weight_<i>``) and, when it was compiled, its optimizer's variables
(``optimizer_<i>``, iterations and learning rate included), in their order; a variable is ``value``. Restoring
checks the counts and shapes against the object it assigns into, and builds an optimizer that has not created its
variables yet (a model compiled but not trained) under the model's strategy, as its first step would.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

WEIGHT = "weight_"
OPTIMIZER = "optimizer_"


def loaded_classes() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """(models, variables, checkpointables): the classes of the Keras and TensorFlow modules already imported."""
    models: list[type] = []
    variables: list[type] = []
    checkpointables: list[type] = []
    for module_name in ("keras", "tf_keras"):
        keras = sys.modules.get(module_name)
        layers = getattr(keras, "layers", None)
        for cls in (getattr(keras, "Model", None), getattr(layers, "Layer", None)):
            if isinstance(cls, type):
                models.append(cls)
        if isinstance(getattr(keras, "Variable", None), type):
            variables.append(keras.Variable)  # type: ignore[union-attr]  # Keras 3's own variable
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(getattr(tf, "Variable", None), type):
        variables.append(tf.Variable)
        checkpointables += [cls for cls in (getattr(tf, "Module", None), getattr(getattr(tf, "train", None),
                                                                                  "Checkpoint", None))
                            if isinstance(cls, type)]
    return tuple(models), tuple(variables), tuple(checkpointables)


def arrays_of(obj: Any, kind: str) -> dict[str, Any]:
    """The arrays that hold ``obj``'s state: a model's (or layer's) weights and optimizer variables, a variable's
    value."""
    import numpy as np

    if kind == "variable":
        return {"value": np.asarray(obj.numpy())}
    arrays = {f"{WEIGHT}{i}": np.asarray(w.numpy()) for i, w in enumerate(obj.weights)}
    optimizer = getattr(obj, "optimizer", None)
    if optimizer is not None:
        arrays.update({f"{OPTIMIZER}{i}": np.asarray(v.numpy()) for i, v in enumerate(_optimizer_variables(optimizer))})
    return arrays


def describe(arrays: Mapping[str, Any]) -> str:
    """"4 weights + 9 optimizer variables, 0.1 MiB" / "float32 (8, 16)" (what the cell's note shows)."""
    size = sum(int(getattr(a, "nbytes", 0)) for a in arrays.values()) / 2**20
    if set(arrays) == {"value"}:
        value = arrays["value"]
        return f"{value.dtype} {tuple(value.shape)}"
    weights = sum(1 for k in arrays if k.startswith(WEIGHT))
    optimizer = sum(1 for k in arrays if k.startswith(OPTIMIZER))
    text = f"{weights} weights" + (f" + {optimizer} optimizer variables" if optimizer else "")
    if weights + optimizer != len(arrays):
        text = f"{len(arrays)} arrays"
    return f"{text}, {size:.1f} MiB"


def assign_arrays(obj: Any, kind: str, arrays: Mapping[str, Any]) -> str:
    """Assign saved ``arrays`` into ``obj`` (same kind as saved); what was restored. ValueError when the object
    does not have the saved shapes (it was built differently)."""
    if kind == "variable":
        _check_shapes("variable's shape", [obj], [arrays["value"]])
        obj.assign(arrays["value"])
        return "variable assigned"
    weights = _ordered(arrays, WEIGHT)
    _check_shapes("model's weights", list(obj.weights), weights)
    saved_optimizer = _ordered(arrays, OPTIMIZER)
    optimizer = getattr(obj, "optimizer", None)
    targets: list[Any] = []
    if saved_optimizer:
        if optimizer is None:
            raise ValueError("the saved model had an optimizer, this one has none: compile it as the saved one was, "
                             "then restore")
        targets = _optimizer_variables(optimizer)
        if len(targets) != len(saved_optimizer) and hasattr(optimizer, "build"):
            strategy = getattr(obj, "distribute_strategy", None)
            with strategy.scope() if strategy is not None else nullcontext():
                optimizer.build(obj.trainable_variables)  # its slots, as its first training step makes them
            targets = _optimizer_variables(optimizer)
        _check_shapes("optimizer's variables", targets, saved_optimizer)
    for variable, value in zip(list(obj.weights) + targets, weights + saved_optimizer):
        variable.assign(value)
    return f"{len(weights)} weights" + (f" + {len(saved_optimizer)} optimizer variables" if saved_optimizer else "")


def write_checkpoint(obj: Any, prefix: str) -> str:
    """``tf.train.Checkpoint(root=obj).write(prefix)``: the object's variables, as TensorFlow checkpoints them."""
    import tensorflow as tf

    path = tf.train.Checkpoint(root=obj).write(prefix)
    return f"tf.train.Checkpoint of a {type(obj).__name__} ({path})"


def read_checkpoint(obj: Any, prefix: str) -> None:
    """Read a ``write_checkpoint`` into ``obj``; raises when a variable of ``obj`` has no saved value."""
    import tensorflow as tf

    tf.train.Checkpoint(root=obj).read(prefix).assert_existing_objects_matched()


def _optimizer_variables(optimizer: Any) -> list[Any]:
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def _ordered(arrays: Mapping[str, Any], prefix: str) -> list[Any]:
    keys = sorted((k for k in arrays if k.startswith(prefix)), key=lambda k: int(k[len(prefix):]))
    return [arrays[k] for k in keys]


def _check_shapes(what: str, variables: list[Any], values: list[Any]) -> None:
    have = [tuple(v.shape) for v in variables]
    saved = [tuple(a.shape) for a in values]
    if have != saved:
        raise ValueError(f"the {what}: not as saved (here {len(have)}: {have[:6]}"
                         f"{'...' if len(have) > 6 else ''}; saved {len(saved)}: {saved[:6]}"
                         f"{'...' if len(saved) > 6 else ''}): build it as the cell that made the saved one did")
