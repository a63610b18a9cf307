"""What of a worker's namespace a session saves, and as what (pure: no TensorFlow, no files).

A name is saved as one of ``protocol/session_wire.SAVED_KINDS``:

- ``model`` (a Keras model or layer, with its compiled optimizer), ``variable`` (``tf.Variable``,
  ``keras.Variable``), ``checkpoint`` (any other trackable: ``tf.Module``, ``tf.train.Checkpoint``, a Keras
  optimizer on its own, and a Keras 3 metric through its variables; or a tuple, list or dict holding one of them):
  worker 0's copy, written with TensorFlow's checkpointing, restored into the rebuilt objects on every worker;
- ``array`` (a numpy array or scalar, or a tuple, list or dict of arrays and JSON scalars) and ``value`` (JSON):
  every worker its own, back by themselves in the new processes.

A container is flattened into a JSON ``structure`` (``{"leaf": i}``, ``{"tuple": [...]}``, ``{"list": [...]}``,
``{"dict": [[key, ...], ...]}``, str keys only) and its leaves; ``unflatten`` rebuilds it. Anything else is left
out with why: its type, a generator (where it got to cannot be saved), a container holding such a value.
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TRACKABLE_KINDS = ("model", "variable", "checkpoint")  # worker 0's, restored into rebuilt objects
MAX_DEPTH = 8  # containers nested deeper are left out
MAX_LEAVES = 10_000


@dataclass(frozen=True)
class Kinds:
    """The classes that make a value a model, a variable, a checkpointable object, or a holder of variables (a
    Keras 3 metric: not trackable itself) — TensorFlow's and Keras' as far as they are loaded (plain classes in
    unit tests)."""

    models: tuple[type, ...] = ()
    variables: tuple[type, ...] = ()
    checkpointables: tuple[type, ...] = ()
    holders: tuple[type, ...] = ()


@dataclass
class SavePlan:
    """What a save writes: (name, kind) in namespace order, and the names left out with why."""

    entries: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Flat:
    """A value as a JSON ``structure`` and its ``leaves`` [(kind, value)] (a single leaf: ``{"leaf": 0}``)."""

    structure: Any
    leaves: list[tuple[str, Any]]

    @property
    def trackable(self) -> bool:
        return any(kind in TRACKABLE_KINDS for kind, _ in self.leaves)


class NotSaved(ValueError):
    """Why a value is not saved (its message is what the cell shows)."""


def a_type(value: Any) -> str:
    """"a Generator", "an EagerTensor": the value's type with its article."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def leaf_kind(value: Any, kinds: Kinds) -> str | None:
    """``model``, ``variable``, ``checkpoint``, ``array``, ``scalar`` (JSON number, string, bool, None) or None."""
    if kinds.models and isinstance(value, kinds.models):
        return "model"
    if kinds.variables and isinstance(value, kinds.variables):
        return "variable"
    if (kinds.checkpointables and isinstance(value, kinds.checkpointables)) or (
            kinds.holders and isinstance(value, kinds.holders)):
        return "checkpoint"
    if is_plain_array(value):
        return "array"
    if isinstance(value, (bool, int, str, type(None))) or (isinstance(value, float) and _is_json_value(value)):
        return "scalar"
    return None


def flatten(value: Any, kinds: Kinds, depth: int = 0, path: str = "") -> Flat:
    """``value`` as a structure and leaves; NotSaved says why it cannot be (and where, in a container)."""
    if depth > MAX_DEPTH:
        raise NotSaved(f"nested deeper than {MAX_DEPTH} containers")
    kind = leaf_kind(value, kinds)
    if kind is not None:
        return Flat({"leaf": 0}, [(kind, value)])
    if isinstance(value, (tuple, list, dict)):
        if isinstance(value, tuple) and type(value) is not tuple:
            raise NotSaved(f"{a_type(value)}{_at(path)} (a named tuple: its class is code)")
        items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        leaves: list[tuple[str, Any]] = []
        parts: list[Any] = []
        for key, item in items:
            if isinstance(value, dict) and not isinstance(key, str):
                raise NotSaved(f"a dict with {a_type(key)} key{_at(path)} (only str keys are saved)")
            inner = flatten(item, kinds, depth + 1, f"{path}[{key!r}]")
            parts.append([key, _shift(inner.structure, len(leaves))] if isinstance(value, dict)
                         else _shift(inner.structure, len(leaves)))
            leaves += inner.leaves
            if len(leaves) > MAX_LEAVES:
                raise NotSaved(f"more than {MAX_LEAVES} values in its containers")
        return Flat({type(value).__name__: parts}, leaves)
    raise NotSaved(_why_not(value, path))


def unflatten(structure: Any, leaves: list[Any]) -> Any:
    """The value ``flatten`` took apart, with ``leaves`` (in its order) in place."""
    if "leaf" in structure:
        return leaves[structure["leaf"]]
    if "dict" in structure:
        return {key: unflatten(part, leaves) for key, part in structure["dict"]}
    items = [unflatten(part, leaves) for part in structure.get("list", structure.get("tuple", []))]
    return tuple(items) if "tuple" in structure else items


def same_shape(saved: Any, rebuilt: Any) -> bool:
    """The rebuilt value's structure is the saved one (same containers, keys, lengths and leaf places)."""
    return bool(json.dumps(saved, sort_keys=True) == json.dumps(rebuilt, sort_keys=True))


def kind_of(value: Any, kinds: Kinds) -> str | None:
    """The saved kind of a namespace value, or None (``plan_save`` says why)."""
    try:
        return _kind(value, kinds)
    except NotSaved:
        return None


def _kind(value: Any, kinds: Kinds) -> str:
    if _is_json_value(value) and not is_plain_array(value):
        return "value"
    flat = flatten(value, kinds)
    if flat.structure == {"leaf": 0}:
        kind = flat.leaves[0][0]
        return "value" if kind == "scalar" else kind
    return "checkpoint" if flat.trackable else "array"


def plan_save(namespace: Mapping[str, Any], kinds: Kinds, worker: int, max_bytes: int, holder: int = 0) -> SavePlan:
    """The names of ``namespace`` to save: public names only; modules, functions and classes are code (the cells
    make them again); trackables (and containers holding one) on the ``holder`` only (worker 0 unless it is
    gone); arrays and JSON values while they fit in ``max_bytes`` (trackables are measured as they are written:
    ``namespace.save_namespace``)."""
    plan = SavePlan()
    budget = max_bytes
    for name, value in list(namespace.items()):
        if name.startswith("_") or not name.isidentifier() or is_code(value):
            continue
        try:
            kind = _kind(value, kinds)
        except NotSaved as why:
            plan.skipped.append((name, str(why)))
            continue
        if kind in TRACKABLE_KINDS:
            if worker == holder:
                plan.entries.append((name, kind))
            continue  # the holder's copy is restored on every worker
        size = nbytes(value, kind, kinds)
        if size > budget:
            plan.skipped.append((name, too_large(size, max_bytes)))
        else:
            budget -= size
            plan.entries.append((name, kind))
    return plan


def too_large(size: int, max_bytes: int) -> str:
    return f"too large: {size / 2**20:.1f} MiB, past the {max_bytes / 2**20:.0f} MiB saved at most"


def nbytes(value: Any, kind: str, kinds: Kinds) -> int:
    if kind == "value":
        return len(json.dumps(value))
    return sum(int(v.nbytes) if k == "array" else len(json.dumps(v)) for k, v in flatten(value, kinds).leaves)


def is_code(value: Any) -> bool:
    return isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                              type))


def is_plain_array(value: Any) -> bool:
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


def _shift(structure: Any, offset: int) -> Any:
    """``structure`` with its leaf numbers moved by ``offset`` (a part flattened on its own, placed after others)."""
    if "leaf" in structure:
        return {"leaf": structure["leaf"] + offset}
    if "dict" in structure:
        return {"dict": [[key, _shift(part, offset)] for key, part in structure["dict"]]}
    kind = "list" if "list" in structure else "tuple"
    return {kind: [_shift(part, offset) for part in structure[kind]]}


def _why_not(value: Any, path: str) -> str:
    if isinstance(value, types.GeneratorType) or type(value).__name__ in ("generator", "async_generator"):
        return f"a generator{_at(path)}: where it got to cannot be saved; run the cell that makes it again"
    return f"{a_type(value)}{_at(path)}"


def _at(path: str) -> str:
    return f" at {path}" if path else ""
