"""The kernel side of ``Session.pull``: ask a worker for a value, take its reply off the data socket, decode it
without running anything.

The reply is one data message (``protocol/session_data.py``: signed JSON with the value's tree and a MAC of
its blobs, then the ``.npy`` headers and array bytes as raw frames). Arrays are numpy views of the received
frames (``session_values.read_npy``: the ``.npy`` header checked, ``np.frombuffer``, never pickle). A local
session's large reply comes in a shared-memory file named after the request instead (``session_shm``: checked,
unlinked, mapped read-only; the arrays are views of the mapping). A reply that
is unsigned, for another request, over ``pull_max_bytes``, whose data does not match its MAC, that holds a
pickle or an object array raises ``PullError`` or is dropped and counted (``DataChannel.dropped``); nothing is
executed. On ``--backend ray`` a reply that did not come with the asked worker's CurveZMQ key is dropped before it
is unpacked (``DataChannel.sent_by``).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from nbworkers.protocol import session_data, session_values


class PullError(RuntimeError):
    """A pull failed: the expression raised in the worker, the value cannot travel, or the reply was refused."""


class PullRequest:
    """One pending pull: the session fails it (``fail``) when its processes restart or it ends."""

    def __init__(self, request: str, worker: int, gen: int):
        self.request, self.worker, self.gen = request, worker, gen
        self.error: str | None = None
        self._failed = threading.Event()

    @property
    def failed(self) -> bool:
        return self._failed.is_set()

    def fail(self, message: str) -> None:
        if not self._failed.is_set():
            self.error = message
            self._failed.set()


def wait_for_worker(session, worker: int, what: str) -> None:
    """Return once ``worker`` can take a command: after the cells submitted before the call (an Interrupt in
    the notebook stops waiting), and once the workers are (re)started; ``PullError`` when the session ended."""
    session.check_index(worker)
    while True:
        cell = session.last_pending_cell()
        if cell is None:
            break
        cell.wait(raise_on_failure=False)
    deadline = time.monotonic() + session.settings.pull_timeout
    while True:  # the workers may still be starting (or restarting)
        with session.lock:
            if session.ending:
                raise PullError(f"session {session.name!r} is {session.status}: nothing to {what}")
            if session.ready(worker):
                return
        if time.monotonic() > deadline:
            raise PullError(f"worker {worker} of session {session.name!r} was not ready in "
                            f"{session.settings.pull_timeout:g} s (setting pull_timeout)")
        time.sleep(0.05)


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
    wait_for_worker(session, worker, "pull from")
    data = session.data_channel
    with data.lock:
        with session.lock:
            request = PullRequest(uuid.uuid4().hex, worker, session.state.generation)
            session.pending_pulls[request.request] = request
            reached = session.channel.send(
                "pull", workers=[worker], request=request.request, expression=expression,
                max_bytes=session.settings.pull_max_bytes, data=data.address,
                shm_path=data.shm_path(request.request, request.gen), shm_min_bytes=session.settings.shm_min_bytes,
            )
        if not reached:
            request.fail(f"worker {worker} cannot be reached (it is gone; the session restarts it)")
        try:
            return _receive(session, data, request, timeout or session.settings.pull_timeout)
        finally:
            with session.lock:
                session.pending_pulls.pop(request.request, None)
            if data.shm is not None:  # a reply that never came (or was refused) leaves no file behind
                data.shm.discard(data.shm.path("pull", request.request))


def _receive(session, data, request: PullRequest, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    source = f"worker {request.worker}'s reply"
    while not request.failed:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise PullError(f"no reply from worker {request.worker} in {timeout:g} s (setting pull_timeout)")
        frames = data.receive(min(remaining, 0.2))
        if frames is None:
            continue
        if not data.sent_by(request.worker):  # another node's key (``--backend ray``): not this worker's reply
            data.dropped += 1
            data.forged += 1
            continue
        try:
            kind, content, blobs = session.unpack_reply(frames, data.open_reply if data.shm is not None else None)
        except session_data.DataError as error:
            if "more than the limit" in str(error) and _is_for(frames, request):
                raise PullError(f"refused {source}: {error} (setting pull_max_bytes)") from None
            data.dropped += 1
            if "shared memory" in str(error) and _is_for(frames, request):  # signed, but its file failed a check
                raise PullError(f"refused {source}: {error}") from None
            continue
        if (kind != "pull" or content.get("request") != request.request or content.get("worker") != request.worker
                or content.get("gen") != request.gen):
            data.dropped += 1  # another (earlier, abandoned) request's reply, or a confused sender
            continue
        if content.get("error"):
            raise PullError(f"worker {request.worker}: {str(content['error'])[:2000]}")
        try:
            return session_values.decode(content.get("value"), blobs, allow_pickle=False, source=source)
        except session_values.ValueDecodeError as error:
            raise PullError(str(error)) from None
    raise PullError(request.error or "the pull was abandoned")


def _is_for(frames: list[Any], request: PullRequest) -> bool:
    """Whether an over-limit reply names this request (its JSON only; the signature was checked first)."""
    return request.request.encode("ascii") in bytes(frames[session_data.SIGNED_FRAMES - 1])
