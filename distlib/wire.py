"""The relay's wire format: signed JSON messages from workers to the kernel.

Both ends use jupyter_client's ``Session`` (HMAC-SHA256 over the JSON frames, JSON packer only: no pickle
is ever read). Every cluster has its own key, handed to its workers in their environment.

A message is ``(kind, content)``. Every content carries ``worker`` (index), ``gen`` (the group's launch
generation, bumped on every restart so stale messages are ignored) and ``t`` (sender's wall time).
Kinds and their extra fields:

- ``hello``   pid (worker process id), host, role, python
- ``status``  state (one of ``WORKER_STATES``), detail (optional text)
- ``log``     lines (list of str; a partial line ending in ``\\r`` is a progress bar redraw)
- ``metrics`` metrics (dict name -> number), step, epoch, steps_total, epochs_total (each optional int)
- ``exit``    code (int; negative: killed by that signal)

This module imports neither TensorFlow nor IPython: the kernel, the host process and the workers share it.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

ENV_RELAY = "NBWORKERS_RELAY"  # tcp://host:port the workers connect to
ENV_KEY = "NBWORKERS_KEY"  # hex HMAC key
ENV_CLUSTER = "NBWORKERS_CLUSTER"  # cluster name
ENV_WORKER = "NBWORKERS_WORKER"  # this process's index in the group (0..N-1, over all roles)
ENV_GENERATION = "NBWORKERS_GENERATION"  # launch generation of the group
ENV_RUN_DIR = "NBWORKERS_RUN_DIR"  # the cluster's run directory (logs, cell code, state)
ENV_CODE = "NBWORKERS_CODE"  # path of the cell's code file
ENV_PUSH = "NBWORKERS_PUSH"  # path of the pickled pushed variables (kernel -> worker only)
ENV_CWD = "NBWORKERS_CWD"  # directory the cell runs in (put first on sys.path)

WORKER_STATES = (
    "starting",  # process launched, importing
    "waiting",  # waiting for its peers (strategy / collectives being set up)
    "running",
    "finished",
    "failed",
    "stopped",
    "restarting",
)

KINDS = ("hello", "status", "log", "metrics", "exit")

_OPTIONAL_INT = (int, type(None))
_NUMBER = (int, float)


def make_session(key: bytes | str):
    """A jupyter_client Session that signs and checks with ``key`` and packs JSON only."""
    from jupyter_client.session import Session

    if isinstance(key, str):
        key = key.encode("ascii")
    return Session(key=key, signature_scheme="hmac-sha256", packer="json", unpacker="json", username="nbworkers")


def new_key() -> str:
    return os.urandom(32).hex()


def validate(kind: str, content: Any) -> str | None:
    """Return None when ``content`` is a well-formed ``kind`` message, else what is wrong with it."""
    if kind not in KINDS:
        return f"unknown kind {kind!r}"
    if not isinstance(content, dict):
        return "content is not an object"
    if not isinstance(content.get("worker"), int) or content["worker"] < 0:
        return "worker is not a non-negative int"
    if not isinstance(content.get("gen"), int):
        return "gen is not an int"
    if kind == "status":
        if content.get("state") not in WORKER_STATES:
            return f"unknown state {content.get('state')!r}"
    elif kind == "log":
        lines = content.get("lines")
        if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
            return "lines is not a list of str"
    elif kind == "metrics":
        metrics = content.get("metrics")
        if not isinstance(metrics, dict) or not all(
            isinstance(k, str) and isinstance(v, _NUMBER) and not isinstance(v, bool) for k, v in metrics.items()
        ):
            return "metrics is not a dict of numbers"
        for field in ("step", "epoch", "steps_total", "epochs_total"):
            if not isinstance(content.get(field), _OPTIONAL_INT) or isinstance(content.get(field), bool):
                return f"{field} is not an int"
    elif kind == "exit":
        if not isinstance(content.get("code"), int):
            return "code is not an int"
    elif kind == "hello":
        if not isinstance(content.get("pid"), int):
            return "pid is not an int"
    return None


class Sender:
    """The worker side of the relay: a ZMQ PUSH socket that sends signed messages.

    Sending never blocks the worker: when the kernel is gone or slow, messages beyond the high-water mark
    are dropped (the log file on disk keeps everything).
    """

    def __init__(self, address: str, key: bytes | str, worker: int, gen: int = 0):
        import zmq

        self.worker = worker
        self.gen = gen
        self._session = make_session(key)
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PUSH)
        self._socket.setsockopt(zmq.SNDHWM, 10_000)
        self._socket.setsockopt(zmq.LINGER, 2000)
        self._socket.connect(address)
        self._zmq = zmq
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "Sender | None":
        """The sender for this process when it runs under %%worker, else None."""
        env = os.environ if environ is None else environ
        if not env.get(ENV_RELAY) or not env.get(ENV_KEY):
            return None
        return cls(env[ENV_RELAY], env[ENV_KEY], int(env.get(ENV_WORKER, "0")), int(env.get(ENV_GENERATION, "0")))

    def send(self, kind: str, **fields: Any) -> bool:
        content = {"worker": self.worker, "gen": self.gen, "t": time.time(), **fields}
        frames = self._session.serialize(self._session.msg(kind, content))
        with self._lock:  # ZMQ sockets are not thread-safe; report() may come from any thread
            try:
                self._socket.send_multipart(frames, flags=self._zmq.NOBLOCK)
            except self._zmq.Again:  # kernel gone or far behind: drop, the log file has it
                return False
        return True

    def close(self, linger_ms: int = 2000) -> None:
        self._socket.close(linger=linger_ms)
        self._context.term()


_process_sender: Sender | None = None
_process_sender_pid: int | None = None


def process_sender() -> Sender | None:
    """One shared Sender per worker process (re-made after a fork), or None outside %%worker."""
    global _process_sender, _process_sender_pid
    if _process_sender is None or _process_sender_pid != os.getpid():
        _process_sender = Sender.from_env()
        _process_sender_pid = os.getpid()
    return _process_sender
