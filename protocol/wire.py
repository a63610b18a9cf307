"""The relay's wire format: signed JSON messages from workers to the kernel.

Messages are in the Jupyter wire format: ``[<IDS|MSG>, HMAC-SHA256 hex, header, parent, metadata, content]``,
JSON only (no pickle is ever read). The kernel's relay checks the framing, the signature and replays itself
(magics/run/relay.py; its replay history is a ``make_session`` Session's). The senders in the workers and hosts
sign with ``Signer``, a few lines of ``hmac`` + ``json`` producing exactly what ``Session.serialize`` would: importing
jupyter_client costs ~0.1 s of CPU per process (it loads its whole client and manager stack), which was
two-thirds of a worker's start-up before the cell's first line, paid by every worker and host of every run
(benchmarks/results.md). ``tests/integration/test_wire_signer_jupyter_client.py`` checks the two agree. Every
cluster has its own key, handed to its workers in their environment.

A message is ``(kind, content)``. Every content carries ``worker`` (index), ``gen`` (the group's launch
generation, bumped on every restart so stale messages are ignored) and ``t`` (sender's wall time).
Kinds and their extra fields:

- ``hello``   pid (worker process id), host, role, python
- ``status``  state (one of ``WORKER_STATES``: ``protocol/statuses.py``), detail (optional text)
- ``log``     lines (list of str; a partial line ending in ``\\r`` is a progress bar redraw)
- ``metrics`` metrics (dict name -> number), step, epoch, steps_total, epochs_total (each optional int);
  JSON has no NaN or infinity, so a diverged ``loss=nan`` travels as the string ``"nan"`` (``"inf"``,
  ``"-inf"``) and the kernel turns it back into a float (``encode_metrics`` / ``decode_metrics``)
- ``exit``    code (int; negative: killed by that signal)

This module imports neither TensorFlow nor IPython: the kernel, the host process and the workers share it.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from nbworkers.protocol import env_settings, session_wire  # session_wire: the session messages (stdlib only)
from nbworkers.protocol.statuses import SENT_BY_WORKERS

# The variables nbworkers sets in each worker (declared, with what they hold, in env_settings.py)
ENV_RELAY = env_settings.RELAY.name  # tcp://host:port the workers connect to
ENV_KEY = env_settings.KEY.name  # hex HMAC key
ENV_CLUSTER = env_settings.CLUSTER.name  # cluster name
ENV_WORKER = env_settings.WORKER.name  # this process's index in the group (0..N-1, over all roles)
ENV_GENERATION = env_settings.GENERATION.name  # launch generation of the group
ENV_RUN_DIR = env_settings.RUN_DIR.name  # the cluster's run directory (logs, cell code, state)
ENV_CODE = env_settings.CODE.name  # path of the cell's code file
ENV_PUSH = env_settings.PUSH.name  # path of the pickled pushed variables (kernel -> worker only)
ENV_CWD = env_settings.CWD.name  # directory the cell runs in (put first on sys.path)
ENV_CELL_SCAN = env_settings.CELL_SCAN.name  # what the cell uses, scanned in the kernel (protocol/cell_scan.py)
# CurveZMQ (--backend ray, protocol/relay_curve.py): the relay's public key; this node's client keypair (made here)
ENV_RELAY_SERVERKEY = env_settings.RELAY_SERVERKEY.name
ENV_RELAY_CLIENTKEY = env_settings.RELAY_CLIENTKEY.name
ENV_RELAY_CLIENTSECRET = env_settings.RELAY_CLIENTSECRET.name

# A worker that saved a checkpoint on SIGTERM exits with this code (tf.distribute PreemptionCheckpointHandler's
# default, distlib/worker/preemption.py); the kernel's supervisor restarts the group on it
# (magics/run/core/failures.py).
PREEMPTION_EXIT_CODE = 42
# "finished" means every worker reached its cell's end: the worker writes CELL_END_LINE when its cell ran to its end
# (distlib/worker/bootstrap.py), and its host, which reads all of its output, turns an exit with 0 without that line
# into ENDED_EARLY_EXIT_CODE, with ENDED_EARLY_LINE and the worker's last output at the end of its log
# (host/worker_host.py); the supervisor fails that attempt (magics/run/core/failures.py: WorkerEndedEarly). The code
# alone is not trusted (a cell may exit with it): the line must end the log too.
CELL_END_LINE = "--- nbworkers: the cell ran to its end\n"
ENDED_EARLY_EXIT_CODE = 86
ENDED_EARLY_LINE = "--- nbworkers: ended early:"
# TensorFlow's preemption watcher thread ended because the worker holding the coordination service left (a normal end
# of training): said in this one line instead of a traceback (distlib/compat/preemption_handler.py); views hide it
WATCHER_STOPPED_LINE = "--- nbworkers: preemption watcher stopped, its peer left:"

WORKER_STATES = tuple(sorted(status.value for status in SENT_BY_WORKERS))  # the ``state`` of a status message

KINDS = ("hello", "status", "log", "metrics", "exit", "cell", "display")  # cell, display: sessions (session_wire.py)

MAX_METRICS = 256  # metric names in one message (the kernel keeps a history of them per worker)
MAX_NAME_CHARS = 200  # characters of one metric name
_OPTIONAL_INT = (int, type(None))
_NUMBER = (int, float)
NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def encode_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """Metric values as JSON can carry them: non-finite floats as ``"nan"``, ``"inf"``, ``"-inf"``."""
    return {
        name: (value if not isinstance(value, float) or math.isfinite(value)
               else "nan" if math.isnan(value) else "inf" if value > 0 else "-inf")
        for name, value in metrics.items()
    }


def decode_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """The inverse of ``encode_metrics`` (for a validated message)."""
    return {name: NON_FINITE[value] if isinstance(value, str) else value for name, value in metrics.items()}


def _is_metric_value(value: Any) -> bool:
    return ((isinstance(value, _NUMBER) and not isinstance(value, bool))
            or (isinstance(value, str) and value in NON_FINITE))


def make_session(key: bytes | str):
    """A jupyter_client Session that signs and checks with ``key`` and packs JSON only."""
    from jupyter_client.session import Session

    if isinstance(key, str):
        key = key.encode("ascii")
    return Session(key=key, signature_scheme="hmac-sha256", packer="json", unpacker="json", username="nbworkers")


class Signer:
    """Signs ``(kind, content)`` into the frames jupyter_client's ``Session.serialize`` would send (JSON packer,
    HMAC-SHA256), without importing jupyter_client. Raises ValueError for content JSON cannot hold (NaN)."""

    DELIM = b"<IDS|MSG>"
    PROTOCOL_VERSION = "5.3"

    def __init__(self, key: bytes | str, username: str = "nbworkers"):
        import hashlib
        import hmac

        self._hmac = hmac.new(key.encode("ascii") if isinstance(key, str) else key, digestmod=hashlib.sha256)
        self._session = uuid.uuid4().hex
        self._username = username

    @staticmethod
    def _pack(obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf8", errors="surrogateescape")

    def frames(self, kind: str, content: dict[str, Any]) -> list[bytes]:
        header = {
            "msg_id": uuid.uuid4().hex,  # unique, so the receiver's replay check never rejects a real message
            "msg_type": kind,
            "username": self._username,
            "session": self._session,
            "date": datetime.now(timezone.utc).isoformat(),
            "version": self.PROTOCOL_VERSION,
        }
        parts = [self._pack(header), self._pack({}), self._pack({}), self._pack(content)]
        digest = self._hmac.copy()
        for part in parts:
            digest.update(part)
        return [self.DELIM, digest.hexdigest().encode("ascii"), *parts]


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
        too_many = isinstance(metrics, dict) and len(metrics) > MAX_METRICS
        if too_many or (isinstance(metrics, dict) and any(len(str(k)) > MAX_NAME_CHARS for k in metrics)):
            return f"more than {MAX_METRICS} metrics, or a name over {MAX_NAME_CHARS} characters"
        if not isinstance(metrics, dict) or not all(isinstance(k, str) and _is_metric_value(v)
                                                    for k, v in metrics.items()):
            return "metrics is not a dict of numbers"
        for field in ("step", "epoch", "steps_total", "epochs_total"):
            if not isinstance(content.get(field), _OPTIONAL_INT) or isinstance(content.get(field), bool):
                return f"{field} is not an int"
    elif kind == "exit":
        if not isinstance(content.get("code"), int):
            return "code is not an int"
    elif kind == "hello":
        if not isinstance(content.get("pid"), int) or isinstance(content.get("pid"), bool) or content["pid"] <= 1:
            return "pid is not a process id (an int > 1)"  # a pid the kernel may later signal: never 0, 1 or -1
    elif kind in ("cell", "display"):  # interactive sessions: their fields are checked in session_wire
        return session_wire.validate(kind, content)
    return None


class Sender:
    """The worker side of the relay: a ZMQ PUSH socket that sends signed messages.

    Sending never blocks the worker: when the kernel is gone or slow, messages beyond the high-water mark
    are dropped (the log file on disk keeps everything).
    """

    def __init__(self, address: str, key: bytes | str, worker: int, gen: int = 0,
                 curve: tuple[str, str, str] | None = None):
        import zmq

        self.worker = worker
        self.gen = gen
        self._signer = Signer(key)
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PUSH)
        if curve is not None:  # (server public, client public, client secret): an encrypted, authorised connection
            self._socket.curve_serverkey = curve[0].encode("ascii")
            self._socket.curve_publickey = curve[1].encode("ascii")
            self._socket.curve_secretkey = curve[2].encode("ascii")
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
        curve = session_wire.client_curve(env)
        return cls(env[ENV_RELAY], env[ENV_KEY], int(env.get(ENV_WORKER, "0")), int(env.get(ENV_GENERATION, "0")),
                   curve=curve)

    def send(self, kind: str, **fields: Any) -> bool:
        if isinstance(fields.get("metrics"), dict):
            fields["metrics"] = encode_metrics(fields["metrics"])
        content = {"worker": self.worker, "gen": self.gen, "t": time.time(), **fields}
        try:
            frames = self._signer.frames(kind, content)
        except (TypeError, ValueError):  # not JSON (a stray NaN or object): the kernel could not read it anyway
            return False
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
