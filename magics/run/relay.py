"""The kernel side of the relay: one ZMQ PULL socket per cluster that checks and decodes what workers send.

Messages that fail the signature (unsigned, forged, replayed) or the schema (malformed) are dropped and
counted, never acted on. Only JSON is ever decoded.

Where it listens (``sockets.bind``): a local run's relay is a Unix socket in the kernel's private runtime
directory (``ipc://``: no TCP port; no other user can open it, and the workers reach it from their private
network namespace); ``--backend ray``: a TCP port on every interface, CurveZMQ-encrypted (``relay_curve.py``).

Memory stays bounded whatever arrives: libzmq cuts a connection that sends a frame over
``relay_max_message_bytes`` before buffering it, at most ``relay_receive_hwm`` messages wait per connection, a
message is received frame by frame and one with more than the relay's 6 frames or more than
``relay_max_message_bytes`` in all is released frame by frame and counted (``sockets.receive``), and the
signature is checked here — exactly 64 lowercase hex digits and the right HMAC — *before* jupyter_client's
``Session`` sees it, because its replay history keeps every signature it is shown (forged ones included). That
history holds at most ``relay_replay_history`` signatures.

Then only the header and the content are parsed (JSON). ``Session.deserialize`` did that too, but also checked
the signature a second time and parsed the dates of every header: ~140 us a message, a fifth of a core for 64
workers at a real pace (benchmarks/many_workers.py); this is ~30 us.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import zmq

from nbworkers.magics.run import sockets
from nbworkers.magics.settings import settings
from nbworkers.protocol import wire
from nbworkers.protocol.lines import cap_line
from nbworkers.protocol.relay_curve import CurveServer

SIGNATURE = re.compile(rb"[0-9a-f]{64}")  # an HMAC-SHA256 hex digest, as the senders write it
HELLO_TEXT_CHARS = 1024  # a hello's host name, role and interpreter path
FRAMES = 6  # <IDS|MSG>, signature, header, parent, metadata, content (the relay's messages carry no buffers)


@dataclass
class Message:
    kind: str
    content: dict[str, Any]


@dataclass
class DropCounts:
    bad_signature: int = 0
    malformed: int = 0
    stale: int = 0  # well signed, but from an earlier launch generation
    oversized: int = 0  # more bytes than relay_max_message_bytes (a single frame that big never arrives at all)
    reasons: list[str] = field(default_factory=list)  # the last few, for diagnosis

    def note(self, what: str, reason: str) -> None:
        setattr(self, what, getattr(self, what) + 1)
        self.reasons = (self.reasons + [f"{what}: {reason}"])[-5:]

    def counts(self) -> dict[str, int]:
        return {"bad_signature": self.bad_signature, "malformed": self.malformed, "stale": self.stale,
                "oversized": self.oversized}

    @property
    def total(self) -> int:
        return self.bad_signature + self.malformed + self.stale + self.oversized


class RelayReceiver:
    """Binds a PULL socket: ``bind_host`` ``"ipc"`` (local runs) or a TCP address (ZMQ picks the port
    atomically: no bind-then-close race)."""

    def __init__(self, key: str, bind_host: str = "127.0.0.1", advertise_host: str | None = None,
                 max_message_bytes: int | None = None, receive_hwm: int | None = None,
                 replay_history: int | None = None, curve: bool = False):
        config = settings()
        self.max_message_bytes = max_message_bytes or config.relay_max_message_bytes
        self.max_line_chars = config.max_line_chars
        self._session = wire.make_session(key)
        self._session.digest_history_size = replay_history or config.relay_replay_history
        self._seen_order: deque[bytes] = deque()  # the replay history's signatures, oldest first
        self._hmac = hmac.new(key.encode("ascii") if isinstance(key, str) else key, digestmod=hashlib.sha256)
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PULL)
        self._socket.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)  # per frame: bigger ones cut the connection
        self._socket.setsockopt(zmq.RCVHWM, receive_hwm or config.relay_receive_hwm)
        self._socket.setsockopt(zmq.LINGER, 0)
        self.curve = None  # --backend ray: encrypted, only the run's workers' keys (relay_curve.py)
        if curve:
            self.curve = CurveServer(self._context, self._socket)
        self.address = sockets.bind(self._socket, bind_host, advertise_host, "relay")
        self.drops = DropCounts()
        self.received = 0
        self._poller = zmq.Poller()
        self._poller.register(self._socket, zmq.POLLIN)

    def poll(self, timeout_s: float, max_messages: int = 5000) -> list[Message]:
        """Wait up to ``timeout_s`` for traffic, then drain what is there (up to ``max_messages``)."""
        out: list[Message] = []
        if not self._poller.poll(int(timeout_s * 1000)):
            return out
        while len(out) < max_messages:
            try:
                frames, sender = sockets.receive_from(self._socket, FRAMES, self.max_message_bytes)
            except zmq.Again:
                break
            if isinstance(frames, sockets.TooBig):
                self.drops.note("oversized", f"{frames.nbytes} bytes in {frames.frames} frames")
                continue
            message = self.decode(frames)
            if message is not None and self.curve is not None and not self.curve.speaks_for(
                    sender, message.content.get("worker")):
                self.drops.note("bad_signature", f"a node's key sent as worker {message.content.get('worker')}, "
                                                 "not the worker it was made for")
                continue
            if message is not None:
                out.append(message)
        return out

    def _precheck(self, frames: list[bytes]) -> bool:
        """Shape, size and signature, before anything is parsed or remembered. False: dropped (and counted)."""
        if sum(len(f) for f in frames) > self.max_message_bytes:
            self.drops.note("oversized", f"{sum(len(f) for f in frames)} bytes in {len(frames)} frames")
            return False
        if len(frames) != FRAMES or frames[0] != wire.Signer.DELIM:
            self.drops.note("malformed", f"{len(frames)} frames, expected {FRAMES} starting with <IDS|MSG>")
            return False
        signature = frames[1]
        if not SIGNATURE.fullmatch(signature):
            self.drops.note("bad_signature", f"not a hex HMAC-SHA256 digest ({len(signature)} bytes)")
            return False
        digest = self._hmac.copy()
        for part in frames[2:6]:
            digest.update(part)
        if not hmac.compare_digest(digest.hexdigest().encode("ascii"), signature):
            self.drops.note("bad_signature", "Invalid Signature")
            return False
        return True

    def _remember(self, signature: bytes) -> bool:
        """False for a signature seen before (a replayed message); else keep it, with the newest others."""
        seen = self._session.digest_history
        if signature in seen:
            return False
        seen.add(signature)
        self._seen_order.append(signature)
        while len(self._seen_order) > self._session.digest_history_size:
            seen.discard(self._seen_order.popleft())
        return True

    def decode(self, frames: list[bytes]) -> Message | None:
        if not self._precheck(frames):
            return None
        if not self._remember(frames[1]):
            self.drops.note("bad_signature", "Duplicate Signature (a replayed message)")
            return None
        try:
            header, content = json.loads(frames[2]), json.loads(frames[5])
        except ValueError as error:  # not JSON, or not UTF-8
            self.drops.note("malformed", f"{type(error).__name__}: {str(error)[:200]}")
            return None
        kind = str(header.get("msg_type")) if isinstance(header, dict) else ""
        problem = wire.validate(kind, content)
        if problem is not None:
            self.drops.note("malformed", problem)
            return None
        if kind == "metrics":
            content["metrics"] = wire.decode_metrics(content["metrics"])
        self._cap_strings(kind, content)
        self.received += 1
        return Message(kind, content)

    def _cap_strings(self, kind: str, content: dict[str, Any]) -> None:
        """Texts the kernel keeps (status detail, hello facts) cut to a line's length: a worker cannot make the
        kernel, the widget or state.json hold an endless one (log lines: LogTail)."""
        fields = ("detail",) if kind == "status" else ("host", "role", "python") if kind == "hello" else ()
        for name in fields:
            if isinstance(content.get(name), str):
                content[name] = cap_line(content[name], self.max_line_chars if name == "detail" else HELLO_TEXT_CHARS)

    @property
    def server_public_key(self) -> str:
        return self.curve.public_key if self.curve is not None else ""

    def allow_client(self, public_key: str, worker: int | None = None) -> None:
        """Let the node key ``public_key`` connect (CurveZMQ), sending as worker ``worker`` only."""
        if self.curve is not None:
            self.curve.allow(public_key, worker)

    def close(self) -> None:
        if self.curve is not None:
            self.curve.close()
        self._socket.close(linger=0)
        self._context.term()
