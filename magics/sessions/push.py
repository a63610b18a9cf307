"""The kernel side of ``Session.push`` and ``Session.scatter``: values from the notebook into the workers' namespaces.

A push is a command (``push``) on the session's command socket with the values as one data message
(``protocol/session_data.py``): the signed JSON names the variables and their trees, the ``.npy`` headers and
array bytes follow as raw frames sent from the arrays' own memory (``copy=False``; the call returns once they
are sent, so the notebook may change them then). A local session's push of ``shm_min_bytes`` or more goes
through a private shared-memory file instead (``protocol/session_shm.py``: written before the call returns).
It waits for the cells submitted before it, as ``pull`` does, and a cell submitted after it sees the values.
Values travel as JSON and ``.npy``; anything else needs ``allow_pickle=True`` (the notebook's own objects,
unpickled in the workers, never the other way round). ``scatter(name, array)`` pushes
``array_split(array, n)[i]`` to worker ``i`` (axis 0).
"""

from __future__ import annotations

import keyword
from typing import Any

from nbworkers.magics.sessions.pull import PullError, wait_for_worker
from nbworkers.protocol import session_values


class PushError(PullError):
    """A push or scatter was refused: a value that needs pickle without ``allow_pickle``, too large, a bad name,
    or a worker that cannot be reached."""


def _check_names(values: dict[str, Any]) -> None:
    if not values:
        raise PushError("push needs name=value pairs, for example push(x=array, lr=0.01)")
    for name in values:
        if not name.isidentifier() or keyword.iskeyword(name):
            raise PushError(f"push: {name!r} is not a Python name")


def _encode(values: dict[str, Any], allow_pickle: bool, limit: int) -> tuple[dict[str, Any], list[Any]]:
    try:
        tree, blobs = session_values.encode(values, allow_pickle=allow_pickle)
    except session_values.PullValueError as error:
        raise PushError(f"push: {error}; or pass allow_pickle=True to send it pickled (the workers unpickle it: "
                        "only for your own objects)") from None
    size = sum(memoryview(b).nbytes for b in blobs)
    if size > limit:
        raise PushError(f"push: {size / 2**20:.1f} MiB for one worker, more than push_max_bytes "
                        f"({limit / 2**20:.1f} MiB): scatter it, or save it to a file the workers read")
    return tree, blobs


def push(session, values: dict[str, Any], workers: list[int] | None = None, allow_pickle: bool = False) -> list[int]:
    """Assign ``values`` (name -> value) in the namespaces of ``workers`` (default: all); returns the workers."""
    _check_names(values)
    targets = list(range(len(session.state.workers))) if workers is None else list(workers)
    tree, blobs = _encode(values, allow_pickle, session.settings.push_max_bytes)
    for worker in targets:
        _send(session, worker, tree, blobs)
    return targets


def scatter(session, name: str, array: Any, workers: list[int] | None = None) -> list[tuple[int, int]]:
    """Worker ``i`` of ``workers`` (default: all) gets ``name`` = the i-th of ``len(workers)`` shards of ``array``
    along axis 0 (``numpy.array_split``: the first ones one row longer when it does not divide). Returns each
    worker's (start, stop) rows."""
    import numpy as np

    _check_names({name: None})
    targets = list(range(len(session.state.workers))) if workers is None else list(workers)
    array = np.asarray(array)
    if array.ndim == 0:
        raise PushError("scatter needs an array with at least one axis (it splits axis 0); use push for a scalar")
    shards = np.array_split(array, len(targets), axis=0)
    rows, start = [], 0
    for worker, shard in zip(targets, shards):
        tree, blobs = _encode({name: shard}, False, session.settings.push_max_bytes)
        _send(session, worker, tree, blobs)
        rows.append((start, start + len(shard)))
        start += len(shard)
    return rows


def _send(session, worker: int, tree: dict[str, Any], blobs: list[Any]) -> None:
    wait_for_worker(session, worker, "push to")
    reached = session.channel.send_data("push", worker, {"values": tree}, blobs, session.settings.pull_timeout,
                                        session.settings.shm_min_bytes)
    if not reached:
        raise PushError(f"worker {worker} cannot be reached (it is gone; the session restarts it): push again")
