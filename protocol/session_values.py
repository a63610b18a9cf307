"""What ``Session.pull(expression)`` may bring back, encoded in a worker: JSON and ``.npy`` bytes, never pickle.

``encode(value)`` returns ``(tree, blobs)``: ``tree`` is JSON-able, ``blobs`` a list of ``.npy`` files (bytes,
written with ``allow_pickle=False``) that the tree refers to by number. Accepted values:

- ``None``, bools, ints, floats (NaN and infinities included), strings;
- lists and tuples (both come back as lists), dicts with string keys;
- numpy arrays of numbers, bools or fixed-width strings, numpy scalars, TensorFlow tensors and variables
  (anything with ``.numpy()``): arrays;
- a Keras ``History``: its ``.history`` dict.

Anything else raises ``PullValueError`` naming what to pull instead. The kernel decodes with
``nbworkers.magics.sessions.pull`` (``np.lib.format.read_array(..., allow_pickle=False)``).
No TensorFlow import here: tensors are recognised by duck typing.
"""

from __future__ import annotations

import io
import math
from typing import Any

TAG = "__nbw__"  # a dict with this key is an encoded value, not user data
MAX_DEPTH = 100


class PullValueError(TypeError):
    """The value cannot be sent back to the notebook safely."""


def _array_blob(array: Any) -> bytes:
    import numpy as np

    array = np.asarray(array)
    if array.dtype.hasobject:
        raise PullValueError(
            f"an array of Python objects (dtype {array.dtype}) cannot be pulled: only numbers, bools and strings"
        )
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def encode(value: Any) -> tuple[Any, list[bytes]]:
    blobs: list[bytes] = []

    def walk(item: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise PullValueError(f"the value is nested more than {MAX_DEPTH} levels deep")
        if item is None or isinstance(item, (bool, int, str)):
            return item
        if isinstance(item, float):
            return item if math.isfinite(item) else {TAG: "float", "value": repr(item)}
        if isinstance(item, (list, tuple)):
            return [walk(x, depth + 1) for x in item]
        if isinstance(item, dict):
            out = {}
            for key, x in item.items():
                if not isinstance(key, str):
                    raise PullValueError(f"dict key {key!r} is not a str: only str keys can be pulled")
                if key == TAG:
                    raise PullValueError(f"dict key {TAG!r} is reserved by nbworkers")
                out[key] = walk(x, depth + 1)
            return out
        history = getattr(item, "history", None)
        if isinstance(history, dict) and hasattr(item, "epoch"):  # a Keras History
            return walk(history, depth + 1)
        module = type(item).__module__ or ""
        if module.startswith("numpy") and hasattr(item, "dtype"):
            if getattr(item, "ndim", None) == 0 and not getattr(item.dtype, "hasobject", False):
                return walk(item.item(), depth + 1)  # numpy scalar -> Python number/bool/str
            blobs.append(_array_blob(item))
            return {TAG: "array", "blob": len(blobs) - 1}
        if callable(getattr(item, "numpy", None)) and hasattr(item, "dtype"):  # tf.Tensor, tf.Variable
            return walk(item.numpy(), depth + 1)
        raise PullValueError(
            f"a {type(item).__module__}.{type(item).__qualname__} cannot be pulled: pull numbers, strings, numpy "
            "arrays or tensors, lists or dicts of them (e.g. model.get_weights(), history.history); save a model "
            "with model.save(path) on the chief and load it from the path"
        )

    return walk(value, 0), blobs
