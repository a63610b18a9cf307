"""The kernel side of the relay: one ZMQ PULL socket per cluster that checks and decodes what workers send.

Messages that fail the signature (unsigned, forged, replayed) or the schema (malformed) are dropped and
counted, never acted on. Only JSON is ever decoded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import zmq

from nbworkers.distlib import wire


@dataclass
class Message:
    kind: str
    content: dict[str, Any]


@dataclass
class DropCounts:
    bad_signature: int = 0
    malformed: int = 0
    stale: int = 0  # well signed, but from an earlier launch generation
    reasons: list[str] = field(default_factory=list)  # the last few, for diagnosis

    def note(self, what: str, reason: str) -> None:
        setattr(self, what, getattr(self, what) + 1)
        self.reasons = (self.reasons + [f"{what}: {reason}"])[-5:]

    @property
    def total(self) -> int:
        return self.bad_signature + self.malformed + self.stale


class RelayReceiver:
    """Binds a PULL socket (ZMQ picks the port atomically: no bind-then-close race)."""

    def __init__(self, key: str, bind_host: str = "127.0.0.1", advertise_host: str | None = None):
        self._session = wire.make_session(key)
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PULL)
        self._socket.setsockopt(zmq.RCVHWM, 100_000)
        self._socket.setsockopt(zmq.LINGER, 0)
        port = self._socket.bind_to_random_port(f"tcp://{bind_host}")
        self.port = port
        self.address = f"tcp://{advertise_host or bind_host}:{port}"
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
                frames = self._socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            message = self.decode(frames)
            if message is not None:
                out.append(message)
        return out

    def decode(self, frames: list[bytes]) -> Message | None:
        try:
            _, frames = self._session.feed_identities(frames, copy=True)
            msg = self._session.deserialize(frames, content=True, copy=True)
        except ValueError as error:  # jupyter_client raises ValueError for bad/duplicate signatures
            text = str(error)
            kind = "bad_signature" if ("ignature" in text or "Unsigned" in text) else "malformed"
            self.drops.note(kind, text[:200])
            return None
        except Exception as error:  # undecodable JSON, wrong frame count, ...
            self.drops.note("malformed", f"{type(error).__name__}: {str(error)[:200]}")
            return None
        kind = msg.get("header", {}).get("msg_type") or msg.get("msg_type")
        content = msg.get("content")
        problem = wire.validate(kind, content)
        if problem is not None:
            self.drops.note("malformed", problem)
            return None
        if kind == "metrics":
            content["metrics"] = wire.decode_metrics(content["metrics"])
        self.received += 1
        return Message(kind, content)

    def close(self) -> None:
        self._socket.close(linger=0)
        self._context.term()
