"""What a detached session's supervisor process answers a kernel (``server.py`` carries the messages): each request
kind mapped onto the ``Session`` it serves, each answer JSON (and ``.npy`` frames for a pulled value), never a
pickle. A request is ``(kind, content, blobs)``; an answer is ``(content, blobs)`` with ``ok`` and, when not ok,
``error`` (what to do) and ``ended`` (the session took no new work).

- ``submit``: queue a cell (``code``, ``timeout``, ``display``, ``label``) -> its ``number`` and ``label`` (what the
  views call it: "cell 3").
- ``cell``: a cell's picture (``number``, ``outputs_from``): its state, error, whether it is ``done``, and as one
  JSON blob its snapshot (what the views show), the rich outputs from ``outputs_from`` on, its value once done.
- ``interrupt``: Stop the running cell (or cancel the queued ``number``) -> what was done.
- ``pull``: a value (``expression``, ``worker``, ``timeout``) -> its tree and frames (``session_values``).
- ``push``: values (their tree and frames, ``workers``) into the workers' namespaces, without pickle.
- ``info``: the session's cells, busy or idle, what its processes hold, what the last restart lost.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, Sequence

from nbworkers.protocol import session_values

Answer = tuple[dict[str, Any], list[Any]]
OUTPUTS_PER_ANSWER = 20  # rich outputs in one ``cell`` answer (each at most display_max_bytes): the rest next time


class ServedSession(Protocol):
    """What the handlers need of the session (``Session``; a fake in the unit tests)."""

    name: str
    lock: Any

    @property
    def cells(self) -> list[Any]: ...

    @property
    def status(self) -> str: ...

    @property
    def busy(self) -> bool: ...

    @property
    def lost_note(self) -> str: ...

    def submit(self, code: str, timeout: float | None = None, display: str = "0", label: str = "",
               prompt: int | None = None) -> Any: ...

    def interrupt(self, cell: Any = None) -> str: ...

    def pull(self, expression: str, worker: int = 0, timeout: float | None = None) -> Any: ...

    def push(self, workers: list[int] | None = None, allow_pickle: bool = False, **values: Any) -> list[int]: ...

    def live_cells(self) -> str: ...

    def restore(self) -> Any: ...


def handle(session: ServedSession, kind: str, content: dict[str, Any], blobs: Sequence[Any]) -> Answer:
    """The answer to one request; an exception from the session is an answer with its message, not a crash."""
    handler = HANDLERS.get(kind)
    if handler is None:
        return _refused(f"unknown request {kind!r}")
    try:
        return handler(session, content, blobs)
    except (KeyError, IndexError, TypeError, ValueError) as error:
        return _refused(f"malformed {kind} request ({error})")
    except Exception as error:  # the session's own refusals (SessionEnded, PullError, PushError)
        ended = type(error).__name__ == "SessionEnded"
        return {"ok": False, "error": str(error), "ended": ended, "error_type": type(error).__name__}, []


def _refused(error: str) -> Answer:
    return {"ok": False, "error": error, "ended": False}, []


def _submit(session: ServedSession, content: dict[str, Any], blobs: Sequence[Any]) -> Answer:
    code = content["code"]
    timeout = content.get("timeout")
    display = content.get("display") or "0"
    prompt = content.get("prompt")
    if not isinstance(code, str) or display not in ("0", "all") or not isinstance(timeout, (int, float, type(None))):
        raise ValueError("code must be text, display '0' or 'all', timeout a number or null")
    if prompt is not None and (type(prompt) is not int or prompt < 0):
        raise ValueError("prompt must be the notebook's execution count (an int) or null")
    cell = session.submit(code, timeout=timeout, display=display, label=str(content.get("label") or ""),
                          prompt=prompt)
    return {"ok": True, "number": cell.number, "label": cell.label}, []


def _cell_of(session: ServedSession, number: Any) -> Any:
    if not isinstance(number, int) or not 0 < number <= len(session.cells):
        raise ValueError(f"no cell {number!r} in session {session.name!r}")
    return session.cells[number - 1]


def _cell(session: ServedSession, content: dict[str, Any], blobs: Sequence[Any]) -> Answer:
    cell = _cell_of(session, content["number"])
    start = content.get("outputs_from") or 0
    if not isinstance(start, int) or start < 0:
        raise ValueError("outputs_from must be a count")
    done = cell.done  # read first: a cell done now has all its outputs and its value in what follows
    snapshot = cell.snapshot()
    with session.lock:
        outputs = [_item(item) for item in cell.outputs[start:start + OUTPUTS_PER_ANSWER]]
        more = len(cell.outputs) > start + len(outputs)
        results = {str(worker): _item(item) for worker, item in cell.results.items()} if done else {}
        answer = {"ok": True, "state": cell.state, "error": cell.error, "done": done and not more,
                  "failed_workers": list(cell.failed_workers), "outputs_dropped": cell.outputs_dropped,
                  "failure_text": cell.failure_text()}
    picture = json.dumps({"snapshot": snapshot, "outputs": outputs, "results": results}, default=str)
    return answer, [picture.encode("utf8")]


def _item(item: Any) -> dict[str, Any]:
    return {"worker": item.worker, "data": item.data, "metadata": item.metadata}


def _interrupt(session: ServedSession, content: dict[str, Any], blobs: Sequence[Any]) -> Answer:
    number = content.get("number")
    cell = None if number is None else _cell_of(session, number)
    return {"ok": True, "answer": session.interrupt(cell)}, []


def _pull(session: ServedSession, content: dict[str, Any], blobs: Sequence[Any]) -> Answer:
    worker, timeout = content.get("worker", 0), content.get("timeout")
    if not isinstance(worker, int) or not isinstance(timeout, (int, float, type(None))):
        raise ValueError("worker must be an index, timeout a number or null")
    value = session.pull(content["expression"], worker, timeout)
    tree, frames = session_values.encode(value, allow_pickle=False)
    return {"ok": True, "value": tree}, list(frames)


def _push(session: ServedSession, content: dict[str, Any], blobs: Sequence[Any]) -> Answer:
    workers = content.get("workers")
    if workers is not None and not (isinstance(workers, list) and all(isinstance(w, int) for w in workers)):
        raise ValueError("workers must be a list of indexes or null")
    values = session_values.decode(content["values"], blobs, allow_pickle=False, source="the kernel's push")
    if not isinstance(values, dict) or not all(isinstance(name, str) for name in values):
        raise ValueError("values must map names to values")
    channel = getattr(session, "channel", None)  # a push that falls back to frames says so once (channel.py)
    failed_before: str = getattr(channel, "shm_failed", "")
    answer: dict[str, Any] = {"ok": True, "workers": session.push(workers, False, **values)}
    failed_now: str = getattr(channel, "shm_failed", "")
    if failed_now and not failed_before:
        answer["note"] = str(getattr(channel, "shm_note", ""))  # for the kernel's cell, not only this process's log
    return answer, []


def _restore(session: ServedSession, content: dict[str, Any], blobs: Sequence[Any]) -> Answer:
    """``%workers restore NAME`` from a kernel: the restore cell, queued (NothingToRestore: refused, saying why)."""
    cell = session.restore()
    return {"ok": True, "number": cell.number, "label": cell.label}, []


def _info(session: ServedSession, content: dict[str, Any], blobs: Sequence[Any]) -> Answer:
    with session.lock:
        return {"ok": True, "cells": len(session.cells), "busy": session.busy, "status": session.status,
                "live_cells": session.live_cells(), "lost_note": session.lost_note}, []


HANDLERS = {"submit": _submit, "cell": _cell, "interrupt": _interrupt, "pull": _pull, "push": _push, "info": _info,
            "restore": _restore}
