"""The kernel's command socket of a session: a ZMQ ROUTER the workers' DEALERs connect to (``session_wire``).

A worker becomes addressable when its signed ``ready`` frame arrives (it names the worker's index and launch
generation; its routing id is random). Commands are signed with the cluster's key and numbered; the
generation in each command makes one launch's commands useless to the next. Thread-safe (one lock around
the socket): the supervisor thread drains it, the notebook's thread and widget clicks send on it.

Local backend: a Unix socket in the kernel's private runtime directory, like the relay (``run/sockets.py``: no
TCP port, no other user can open it). Whatever arrives is bounded: frames of at most ``MAX_MESSAGE_BYTES``
(libzmq cuts the sender), ``relay_receive_hwm`` messages per connection, and a message of more than
``MAX_FRAMES`` frames or ``MAX_MESSAGE_BYTES`` bytes is released frame by frame and counted in ``dropped``.
``--backend ray``: bound where the relay binds (the address the nodes are told, when this machine has it:
``sockets.bind_host``) and a CurveZMQ server exactly as the relay is (``relay_curve.CurveServer``, sharing the
relay's server keypair and allowed client keys): only the run's nodes, with the client keypair their actor made
there, can connect, nobody on the path reads the cells, and a ``ready`` naming worker N counts only when it
comes with worker N's key (``speaks_for``).
Commands stay HMAC-signed and numbered on top.

A local push of ``shm_min_bytes`` or more goes through a shared-memory file (``session_shm``). When that file cannot
be written (``/dev/shm`` full, as another user can make it: ENOSPC; any other ``OSError``), the push goes as frames
instead, and so does every later push of this channel; the cell is told once (``SHM_FALLBACK``), not per push.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

import zmq

from nbworkers.magics.run import sockets
from nbworkers.magics.settings import settings
from nbworkers.protocol import session_data, session_shm, session_wire, wire
from nbworkers.protocol.relay_curve import CurveServer

MAX_FRAMES = 8  # routing id, <IDS|MSG>, signature, header, parent, metadata, content (a worker's `ready`)
MAX_MESSAGE_BYTES = 64 * 1024  # a `ready` is a few hundred bytes
SHM_FALLBACK = ("nbworkers: a push through shared memory failed in {folder} ({why}); this session's pushes go over "
                "its socket from now on (the same values, slower for large arrays). `df -h {folder}` shows whether "
                "it is full.")
log = logging.getLogger("nbworkers")


class CommandChannel:
    def __init__(self, key: str, bind_host: str = "127.0.0.1", advertise_host: str | None = None,
                 curve: CurveServer | None = None):
        """``curve``: the relay's CurveZMQ server (``RelayReceiver.curve``) to encrypt this socket as it is, with
        its keys; None: plain (local backend, loopback)."""
        self._key = key
        self._signer = wire.Signer(key)
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)  # an unknown peer is an error, not a silent drop
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)  # per frame: bigger ones cut the connection
        self._socket.setsockopt(zmq.RCVHWM, settings().relay_receive_hwm)
        self.curve = CurveServer(self._context, self._socket, like=curve) if curve is not None else None
        self.address = sockets.bind(self._socket, bind_host, advertise_host, "commands")
        self.shm = session_shm.ShmFiles() if bind_host == sockets.IPC else None  # local: pushes by shared memory
        self.shm_failed = ""  # why a push's shared-memory file could not be written: pushes go as frames since
        self.shm_note = ""  # what the cell was told then (SHM_FALLBACK)
        self._lock = threading.Lock()
        self._seq = 0
        self._peers: dict[int, bytes] = {}  # worker index -> routing id, for the current generation
        self.gen = 0
        self.dropped = 0

    def new_generation(self, gen: int) -> None:
        with self._lock:
            self.gen = gen
            self._peers.clear()
            if self.shm is not None:
                self.shm.sweep()  # pushes the old processes never opened (killed first)

    def ready(self, count: int) -> bool:
        with self._lock:
            return all(i in self._peers for i in range(count))

    def ready_workers(self) -> set[int]:
        with self._lock:
            return set(self._peers)

    def drain(self) -> None:
        """Take in the workers' ``ready`` frames (never blocks)."""
        with self._lock:
            while True:
                try:
                    frames, sender = sockets.receive_from(self._socket, MAX_FRAMES, MAX_MESSAGE_BYTES)
                except zmq.Again:
                    return
                if isinstance(frames, sockets.TooBig):
                    self.dropped += 1
                    continue
                identity, rest = frames[0], frames[1:]
                message = session_wire.verify(rest, self._key)
                if message is None or message[0] != "ready":
                    self.dropped += 1
                    continue
                content = message[1]
                worker, gen = content.get("worker"), content.get("gen")
                if not isinstance(worker, int) or gen != self.gen:
                    self.dropped += 1
                    continue
                if self.curve is not None and not self.curve.speaks_for(sender, worker):
                    self.dropped += 1  # another node's key: it would get this worker's cells and pushes
                    continue
                self._peers[worker] = identity

    def send(self, kind: str, workers: list[int] | None = None, **fields: Any) -> list[int]:
        """Send one command to ``workers`` (default: every ready one); returns those it reached."""
        reached = []
        with self._lock:
            targets = sorted(self._peers) if workers is None else [w for w in workers if w in self._peers]
            for worker in targets:
                self._seq += 1
                frames = self._signer.frames(kind, {"seq": self._seq, "gen": self.gen, **fields})
                try:
                    self._socket.send_multipart([self._peers[worker], *frames], flags=zmq.NOBLOCK)
                    reached.append(worker)
                except (zmq.Again, zmq.ZMQError):  # gone (killed): the supervisor sees its exit
                    pass
        return reached

    def send_data(self, kind: str, worker: int, fields: dict[str, Any], blobs: list[Any],
                  timeout: float = 120.0, shm_min_bytes: int | None = None) -> bool:
        """Send one data message (``session_data.pack``: ``fields`` signed, ``blobs`` as raw frames sent from their
        own memory) to ``worker``; returns once libzmq is done with the blobs' memory (so the caller may change
        them), False when the worker was not reached. Local sessions: blobs of ``shm_min_bytes`` or more in all go
        in a shared-memory file instead (``session_shm``; the worker unlinks it when it maps it)."""
        sizes = [memoryview(b).nbytes for b in blobs]
        if self.shm is not None and not self.shm_failed and shm_min_bytes is not None and sum(sizes) >= shm_min_bytes:
            offered = self._send_offer(kind, worker, fields, blobs, sizes)
            if offered is not None:
                return offered
        return self._send_frames(kind, worker, fields, blobs, timeout)

    def _send_frames(self, kind: str, worker: int, fields: dict[str, Any], blobs: list[Any], timeout: float) -> bool:
        with self._lock:
            if worker not in self._peers:
                return False
            self._seq += 1
            fields = {"seq": self._seq, "gen": self.gen, **fields}
            frames = session_data.pack(self._key, self._signer, kind, fields, blobs)
            try:
                tracker = self._socket.send_multipart([self._peers[worker], *frames], flags=zmq.NOBLOCK,
                                                      copy=False, track=True)
            except (zmq.Again, zmq.ZMQError):
                return False
        try:
            if tracker is not None:
                tracker.wait(timeout)
        except zmq.NotDone:
            return False
        return True

    def _send_offer(self, kind: str, worker: int, fields: dict[str, Any], blobs: list[Any],
                    sizes: list[int]) -> bool | None:
        """The data message as a shared-memory offer: sent or not; None when its file could not be written (the
        caller sends frames)."""
        assert self.shm is not None
        if worker not in self.ready_workers():
            return False
        path = self.shm.path(kind)
        try:
            self.shm.write(path, blobs)  # outside the lock: the copy takes a while
        except OSError as error:
            self.shm.discard(path)
            self._fall_back(error)
            return None
        with self._lock:
            sent = worker in self._peers
            if sent:
                self._seq += 1
                fields = {"seq": self._seq, "gen": self.gen, **fields, "shm_path": str(path)}
                try:
                    self._socket.send_multipart([self._peers[worker],
                                                 *session_data.pack_offer(self._signer, kind, fields, sizes)],
                                                flags=zmq.NOBLOCK)
                except (zmq.Again, zmq.ZMQError):
                    sent = False
        if not sent:
            self.shm.discard(path)
        return sent

    def _fall_back(self, error: OSError) -> None:
        """From now on this channel's pushes go as frames; said once (the cell: stderr; the log)."""
        with self._lock:
            first, self.shm_failed = not self.shm_failed, error.strerror or str(error) or type(error).__name__
        if first:
            folder = self.shm.folder if self.shm is not None else "?"
            text = self.shm_note = SHM_FALLBACK.format(folder=folder, why=self.shm_failed)
            log.info("%s", text)  # info: a warning would reach the cell twice (logging's last resort)
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        with self._lock:
            if self.curve is not None:
                self.curve.close()
            self._socket.close(linger=0)
            self._context.term()
            if self.shm is not None:
                self.shm.sweep(close=True)
