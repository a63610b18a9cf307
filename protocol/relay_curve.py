"""CurveZMQ for the relay across machines (``--backend ray``): encrypted, and only known workers may connect.

The kernel's relay socket is a CURVE server with a keypair made for the run (its public key goes to the
workers: ``NBWORKERS_RELAY_SERVERKEY``). Each Ray worker host actor makes a client keypair *on its node*
(``ray/nodes/host_actor.py``, ``where``); only the public half travels back through Ray, the secret half reaches the
node's host and worker through their environment there and never crosses the network. The kernel allows exactly
those public keys (ZAP, ``allow``): whoever learns the run's HMAC key from Ray's traffic still cannot connect to the
relay, and nobody on the path can read what workers send. A session's command socket (``session_channel``) is the
relay's twin: ``CurveServer(..., like=relay.curve)``, the same server key and allowed keys. The local backend
does not use it (its relay listens on loopback only, and encryption would cost every message CPU for nothing).

Each allowed key is bound to the worker index of the actor that made it (``allow(key, worker)``): libzmq gives
every message the ZAP ``User-Id`` of its sender (this authenticator's default: the client's public key, Z85), and
the kernel's sockets take a message that names worker N (a relay message's ``worker``, a session's ``ready``)
only from worker N's key (``speaks_for``). One authorised node cannot announce itself as another worker and be
sent that worker's cells and pushed variables.
"""

from __future__ import annotations

import threading
from typing import Any

import zmq

ZAP_DOMAIN = "nbworkers"


class AllowedKeys:
    """The ZAP credentials provider: the client public keys (Z85) allowed to connect. Thread-safe."""

    def __init__(self) -> None:
        self._keys: dict[bytes, int | None] = {}  # public key (Z85) -> the worker index it speaks for
        self._lock = threading.Lock()
        self.refused = 0

    def allow(self, public_key: str | bytes, worker: int | None = None) -> None:
        """Let ``public_key`` connect, as worker ``worker`` only (None: as any worker)."""
        with self._lock:
            self._keys[public_key.encode("ascii") if isinstance(public_key, str) else public_key] = worker

    def callback(self, domain: str, key: bytes) -> bool:
        with self._lock:
            allowed = key in self._keys
            self.refused += not allowed
        return allowed

    def speaks_for(self, sender: str, worker: Any) -> bool:
        """May the peer with ZAP User-Id ``sender`` (its Z85 public key) send as worker ``worker``?"""
        with self._lock:
            key = sender.encode("ascii", "replace")
            if key not in self._keys:
                return False
            bound = self._keys[key]
            return bound is None or bound == worker


class CurveServer:
    """Makes ``socket`` (not yet bound: the relay's PULL, a session's command ROUTER) a CURVE server that accepts
    only ``allow``-ed client keys. ``like``: another server whose keypair and allowed keys this one shares (a
    session's command socket is the relay's twin: the workers know one server key, each node's one client
    keypair serves both sockets)."""

    _public: bytes
    _secret: bytes
    keys: AllowedKeys

    def __init__(self, context: zmq.Context, socket: zmq.Socket, like: "CurveServer | None" = None):
        from zmq.auth.thread import ThreadAuthenticator

        public, secret = (like._public, like._secret) if like is not None else zmq.curve_keypair()
        self._public, self._secret = public, secret
        self.public_key = public.decode("ascii")
        self.keys = like.keys if like is not None else AllowedKeys()
        self._auth = ThreadAuthenticator(context)
        self._auth.start()
        self._auth.configure_curve_callback(ZAP_DOMAIN, credentials_provider=self.keys)
        socket.curve_server = True
        socket.curve_secretkey = secret
        socket.curve_publickey = public
        socket.zap_domain = ZAP_DOMAIN.encode()

    def allow(self, public_key: str, worker: int | None = None) -> None:
        self.keys.allow(public_key, worker)

    def speaks_for(self, sender: str, worker: Any) -> bool:
        return self.keys.speaks_for(sender, worker)

    def close(self) -> None:
        self._auth.stop()


def client_keypair() -> tuple[str, str]:
    """(public, secret) Z85 text of a fresh CURVE client keypair (made on the node that uses it)."""
    public, secret = zmq.curve_keypair()
    return public.decode("ascii"), secret.decode("ascii")
