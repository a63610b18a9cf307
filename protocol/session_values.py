"""The values a session's data carries (``Session.pull``, ``push``, ``scatter``): JSON and ``.npy`` bytes.

``encode(value)`` returns ``(tree, blobs)``: ``tree`` is JSON-able, ``blobs`` a list of ``.npy`` files (bytes,
written with ``allow_pickle=False``) that the tree refers to by number. Accepted values:

- ``None``, bools, ints, floats (NaN and infinities included), strings;
- lists and tuples (both come back as lists), dicts with string keys;
- numpy arrays of numbers, bools or fixed-width strings, numpy scalars, TensorFlow tensors and variables
  (anything with ``.numpy()``): arrays;
- a Keras ``History``: its ``.history`` dict.

Anything else raises ``PullValueError`` naming what to send instead — unless ``allow_pickle``: then it is pickled
(``{TAG: "pickle"}``). Only ``push(..., allow_pickle=True)`` does that: the notebook's own values, going to the
workers. ``decode(tree, blobs)`` is the reverse; the kernel always calls it with ``allow_pickle=False`` (a
``pickle`` blob from a worker is refused, never loaded) and reads arrays straight from the received frames
(``np.frombuffer`` after checking the ``.npy`` header: an object array or anything that is not ``.npy`` is
refused). No TensorFlow import here: tensors are recognised by duck typing.
"""

from __future__ import annotations

import io
import math
import pickle
from typing import Any, Sequence

TAG = "__nbw__"  # a dict with this key is an encoded value, not user data
MAX_DEPTH = 100
NPY_MAGIC = b"\x93NUMPY"
FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class PullValueError(TypeError):
    """The value cannot travel safely (as JSON and ``.npy``)."""


class ValueDecodeError(ValueError):
    """A received value was refused: a pickle where none is allowed, bad ``.npy`` data, an unknown encoding."""


def _array_blobs(array: Any) -> tuple[bytes, memoryview]:
    """An array as a ``.npy`` file in two blobs: its header, then its data — the array's own memory when it is
    contiguous (no copy: the frames are sent from it)."""
    import numpy as np

    array = np.asarray(array)
    if array.dtype.hasobject:
        raise PullValueError(
            f"an array of Python objects (dtype {array.dtype}) cannot travel as .npy: only numbers, bools and strings"
        )
    if not (array.flags.c_contiguous or array.flags.f_contiguous):
        array = np.ascontiguousarray(array)
    fields = np.lib.format.header_data_from_array_1_0(array)
    header = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(header, fields)
    except ValueError:  # a header over 64 KiB (a structured dtype with very many fields)
        header = io.BytesIO()
        np.lib.format.write_array_header_2_0(header, fields)
    order = "F" if fields["fortran_order"] else "C"
    return header.getvalue(), memoryview(array.reshape(-1, order=order).view(np.uint8))


def encode(value: Any, allow_pickle: bool = False) -> tuple[Any, list[bytes | memoryview]]:
    blobs: list[bytes | memoryview] = []

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
            blobs.extend(_array_blobs(item))
            return {TAG: "array", "blob": len(blobs) - 2}  # its header; its data is the next blob
        if callable(getattr(item, "numpy", None)) and hasattr(item, "dtype"):  # tf.Tensor, tf.Variable
            return walk(item.numpy(), depth + 1)
        if allow_pickle:
            blobs.append(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
            return {TAG: "pickle", "blob": len(blobs) - 1}
        raise PullValueError(
            f"a {type(item).__module__}.{type(item).__qualname__} cannot be pulled: pull numbers, strings, numpy "
            "arrays or tensors, lists or dicts of them (e.g. model.get_weights(), history.history); save a model "
            "with model.save(path) on the chief and load it from the path"
        )

    return walk(value, 0), blobs


def decode(tree: Any, blobs: Sequence[Any], allow_pickle: bool = False, source: str = "the reply") -> Any:
    """The value ``encode`` made: JSON as it is, ``{TAG: "array"}`` as numpy arrays read from ``blobs`` (views
    of the received memory), ``{TAG: "pickle"}`` only with ``allow_pickle``."""

    def walk(item: Any, depth: int) -> Any:
        if depth > 2 * MAX_DEPTH:
            raise ValueDecodeError(f"refused {source}: nested too deep")
        if isinstance(item, list):
            return [walk(x, depth + 1) for x in item]
        if isinstance(item, dict):
            if TAG not in item:
                return {str(k): walk(v, depth + 1) for k, v in item.items()}
            if item[TAG] == "float" and item.get("value") in FLOATS:
                return FLOATS[item["value"]]
            blob = item.get("blob")
            if isinstance(blob, int) and not isinstance(blob, bool) and 0 <= blob < len(blobs):
                if item[TAG] == "array" and blob + 1 < len(blobs):
                    return read_npy(blobs[blob], blobs[blob + 1], source)
                if item[TAG] == "pickle":
                    if not allow_pickle:
                        raise ValueDecodeError(f"refused {source}: it holds a pickle (pickles are never loaded here)")
                    return pickle.loads(blobs[blob])
            raise ValueDecodeError(f"refused {source}: unknown encoded value {str(item)[:80]}")
        if item is None or isinstance(item, (bool, int, float, str)):
            return item
        raise ValueDecodeError(f"refused {source}: a {type(item).__name__} in the value")

    return walk(tree, 0)


def read_npy(header: Any, data: Any, source: str = "the reply") -> Any:
    """One ``.npy`` file's array (``header``: its magic and header, ``data``: the rest), a view of ``data``'s
    memory; anything else (a pickle, an ``.npz``, an object array, data of the wrong size) raises
    ``ValueDecodeError``."""
    import numpy as np

    head_view = memoryview(header).cast("B")
    if len(head_view) > 1 << 17 or bytes(head_view[:len(NPY_MAGIC)]) != NPY_MAGIC:
        raise ValueDecodeError(f"refused {source}: an array that is not .npy data (pickles are never loaded)")
    try:
        head = io.BytesIO(bytes(head_view))
        version = np.lib.format.read_magic(head)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f".npy version {version}")
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(head)
        if dtype.hasobject:
            raise ValueError("an array of Python objects")
        if head.tell() != len(head_view):
            raise ValueError("bytes after the header")
        view = memoryview(data).cast("B")
        count = math.prod(shape)
        if count * dtype.itemsize != len(view):
            raise ValueError(f"{len(view)} bytes of data for {count} items of {dtype}")
        array = np.frombuffer(view, dtype=dtype, count=count)
        return array.reshape(shape, order="F" if fortran else "C")
    except Exception as error:
        raise ValueDecodeError(f"refused {source}: bad .npy data ({type(error).__name__}: {error})") from None
