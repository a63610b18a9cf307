"""The kernel side of ``Session.pull``: reassemble a worker's reply and decode it without running anything.

A reply is JSON (the value tree, validated by ``session_wire``) plus ``.npy`` bytes in base64 chunks. Arrays are
read with ``numpy.lib.format.read_array(..., allow_pickle=False)`` after checking the ``.npy`` magic: a pickle,
an ``.npz``, an object array, a reply larger than announced or than ``pull_max_bytes``, chunks out of order,
bad base64 or a tree naming a blob that does not exist all raise ``PullError`` and nothing is executed.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import threading
import time
import uuid
from typing import Any

from nbworkers.protocol.session_values import TAG

NPY_MAGIC = b"\x93NUMPY"
FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class PullError(RuntimeError):
    """A pull failed: the expression raised in the worker, the value cannot travel, or the reply was refused."""


class PullRequest:
    """One pending pull: chunks are fed from the supervisor thread, ``result()`` waits in the caller's."""

    def __init__(self, request: str, worker: int, gen: int, max_bytes: int):
        self.request, self.worker, self.gen, self.max_bytes = request, worker, gen, max_bytes
        self._chunks: list[bytes] = []
        self._meta: dict | None = None
        self._size = 0
        self._error: str | None = None
        self._done = threading.Event()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def fail(self, message: str) -> None:
        if not self._done.is_set():
            self._error = message
            self._done.set()

    def feed(self, content: dict[str, Any]) -> None:
        """One ``pull`` relay message (already signature- and schema-checked) for this request."""
        if self._done.is_set():
            return
        index, count, size = content["index"], content["count"], content["size"]
        if content.get("error"):
            return self.fail(f"worker {self.worker}: {content['error']}")
        if index != len(self._chunks):
            return self.fail(f"refused worker {self.worker}'s reply: chunk {index} arrived out of order")
        if size > self.max_bytes:
            return self.fail(f"refused worker {self.worker}'s reply: {size} bytes, more than the pull limit "
                             f"({self.max_bytes} bytes, setting pull_max_bytes)")
        if index == 0:
            if not isinstance(content.get("meta"), dict):
                return self.fail(f"refused worker {self.worker}'s reply: its first chunk has no value")
            self._meta, self._size = content["meta"], size
        elif size != self._size or content.get("meta") is not None:
            return self.fail(f"refused worker {self.worker}'s reply: chunks disagree about its size")
        try:
            data = base64.b64decode(content.get("data") or "", validate=True)
        except (binascii.Error, ValueError):
            return self.fail(f"refused worker {self.worker}'s reply: chunk {index} is not base64")
        self._chunks.append(data)
        received = sum(len(c) for c in self._chunks)
        if received > size:
            return self.fail(f"refused worker {self.worker}'s reply: more bytes than announced")
        if index + 1 == count:
            if received != size:
                return self.fail(f"refused worker {self.worker}'s reply: {received} bytes of {size} announced")
            self._done.set()

    def result(self, timeout: float) -> Any:
        if not self._done.wait(timeout):
            raise PullError(f"no reply from worker {self.worker} in {timeout:g} s (setting pull_timeout)")
        if self._error is not None:
            raise PullError(self._error)
        return decode(self._meta or {}, b"".join(self._chunks), self.worker)


def decode(meta: dict[str, Any], payload: bytes, worker: int = 0) -> Any:
    """The value of a reply: JSON values as they are, ``{TAG: "array"}`` as numpy arrays (never pickle)."""
    sizes = meta.get("blobs")
    if (not isinstance(sizes, list) or not all(isinstance(n, int) and n >= 0 for n in sizes)
            or sum(sizes) != len(payload)):
        raise PullError(f"refused worker {worker}'s reply: its array sizes do not add up")
    blobs, at = [], 0
    for n in sizes:
        blobs.append(payload[at:at + n])
        at += n

    def walk(item: Any, depth: int) -> Any:
        if depth > 200:
            raise PullError(f"refused worker {worker}'s reply: nested too deep")
        if isinstance(item, list):
            return [walk(x, depth + 1) for x in item]
        if isinstance(item, dict):
            if TAG not in item:
                return {str(k): walk(v, depth + 1) for k, v in item.items()}
            if item[TAG] == "float" and item.get("value") in FLOATS:
                return FLOATS[item["value"]]
            if item[TAG] == "array" and isinstance(item.get("blob"), int) and 0 <= item["blob"] < len(blobs):
                return read_npy(blobs[item["blob"]], worker)
            raise PullError(f"refused worker {worker}'s reply: unknown encoded value {str(item)[:80]}")
        if item is None or isinstance(item, (bool, int, float, str)):
            return item
        raise PullError(f"refused worker {worker}'s reply: a {type(item).__name__} in the value")

    return walk(meta.get("value"), 0)


def read_npy(blob: bytes, worker: int = 0) -> Any:
    """One ``.npy`` file's array; anything else (a pickle, an ``.npz``, an object array) is refused."""
    if not blob.startswith(NPY_MAGIC):
        raise PullError(f"refused worker {worker}'s reply: an array that is not .npy data (pickles are never loaded)")
    import numpy as np

    try:
        return np.lib.format.read_array(io.BytesIO(blob), allow_pickle=False)
    except Exception as error:  # object arrays raise ValueError with allow_pickle=False; truncated data too
        raise PullError(f"refused worker {worker}'s reply: bad .npy data ({type(error).__name__}: {error})") from None


def pull(session, expression: str, worker: int = 0, timeout: float | None = None) -> Any:
    """The value of ``expression`` in ``worker``'s namespace, after the cells submitted before this call:
    numbers, strings, None, lists, dicts, numpy arrays (tensors come back as arrays), a History's dict.
    Raises ``PullError`` when the expression raises, the value cannot travel, or the reply is refused."""
    if not isinstance(expression, str) or not expression.strip():
        raise PullError("pull needs an expression, for example pull('history.history', worker=0)")
    try:
        compile(expression, "<pull>", "eval")
    except SyntaxError as error:
        raise PullError(f"pull({expression!r}): not an expression ({error.msg}); use a name or an "
                        "expression such as model.get_weights(), not a statement") from None
    session._check_index(worker)
    while True:  # after the cells submitted before it (an Interrupt in the notebook stops waiting)
        cell = session.last_pending_cell()
        if cell is None:
            break
        cell.wait(raise_on_failure=False)
    deadline = time.monotonic() + session.settings.pull_timeout
    while True:  # the workers may still be starting (or restarting)
        with session._lock:
            if session._done.is_set() or session._core.stopping:
                raise PullError(f"session {session.name!r} is {session.status}: nothing to pull from")
            ready = not session._core.restart_pending and worker in session._channel.ready_workers()
            if ready:
                request = PullRequest(uuid.uuid4().hex, worker, session.state.generation,
                                      session.settings.pull_max_bytes)
                session._pulls[request.request] = request
                reached = session._channel.send(
                    "pull", workers=[worker], request=request.request, expression=expression,
                    max_bytes=session.settings.pull_max_bytes, chunk_bytes=session.settings.pull_chunk_bytes,
                )
                if not reached:
                    request.fail(f"worker {worker} cannot be reached (it is gone; the session restarts it)")
                break
        if time.monotonic() > deadline:
            raise PullError(f"worker {worker} of session {session.name!r} was not ready in "
                            f"{session.settings.pull_timeout:g} s (setting pull_timeout)")
        time.sleep(0.05)
    try:
        return request.result(timeout or session.settings.pull_timeout)
    finally:
        with session._lock:
            session._pulls.pop(request.request, None)
