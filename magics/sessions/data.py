"""The kernel's data socket of a session: a ZMQ PULL socket the workers' ``pull`` replies arrive on, as raw frames.

Apart from the relay so that the relay's bounds stay small (its messages are JSON of a few KiB) while a pulled
value may be hundreds of MiB. Bound where the command socket is (a Unix socket in the private runtime directory
for local runs; CurveZMQ with the relay's keys on ``--backend ray``). What it can make the kernel hold is bounded:
a frame over ``pull_max_bytes`` plus the JSON allowance cuts the sender's connection before it is buffered
(``MAXMSGSIZE``), at most ``data_receive_hwm`` messages wait per connection, and a message of more frames or bytes
than a value may have is released frame by frame and counted (``receive``). Only the notebook's ``pull`` call
reads it (one at a time, under ``lock``), so nothing accumulates between pulls beyond those few messages. As
for the relay (``run/sockets.py``), libzmq queues a message whole before its first frame can be read: that
queue only the user's own processes (ipc) or the run's authenticated nodes (CurveZMQ) can fill.
Frames are received without copying (``recv(copy=False)``); ``session_data.unpack`` checks them.

On ``--backend ray`` each node's key speaks for its own worker only, as on the relay and the command socket
(``relay_curve.speaks_for``): ``receive`` keeps the sender's ZAP ``User-Id`` (its public key) and ``sent_by(N)``
says whether the message came with worker N's key; ``pull`` drops a reply for worker N that did not (counted in
``dropped`` and ``forged``), so one authorised node cannot answer a pull for another worker.
"""

from __future__ import annotations

import threading
from typing import Any

import zmq

from nbworkers.magics.run import sockets
from nbworkers.magics.settings import settings
from nbworkers.protocol import session_data, session_shm
from nbworkers.protocol.relay_curve import CurveServer


class DataChannel:
    def __init__(self, bind_host: str = "127.0.0.1", advertise_host: str | None = None,
                 curve: CurveServer | None = None):
        config = settings()
        self.max_bytes = config.pull_max_bytes + session_data.MAX_JSON_BYTES
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PULL)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, self.max_bytes)  # per frame: bigger ones cut the connection
        self._socket.setsockopt(zmq.RCVHWM, config.data_receive_hwm)
        self.curve = CurveServer(self._context, self._socket, like=curve) if curve is not None else None
        self.address = sockets.bind(self._socket, bind_host, advertise_host, "data")
        self.shm = session_shm.ShmFiles() if bind_host == sockets.IPC else None  # local: replies by shared memory
        self.lock = threading.Lock()  # one pull at a time reads the socket
        self.dropped = 0
        self.forged = 0  # replies dropped for coming with another worker's key (also in ``dropped``)
        self.last_sender = ""  # the ZAP User-Id of the last message ``receive`` returned ("" without CurveZMQ)
        self._gen: int | None = None  # the generation of the last pull

    def receive(self, timeout_s: float) -> list[Any] | None:
        """One message's frames (``zmq.Frame``s, not copied) within the bounds; None when none came in
        ``timeout_s`` or the one that came was over them (counted in ``dropped``)."""
        if not self._socket.poll(int(timeout_s * 1000)):
            return None
        frames: list[Any] = []
        count = size = 0
        frame = self._socket.recv(zmq.NOBLOCK, copy=False)
        self.last_sender = sockets.sender_of(frame)
        while True:
            count += 1
            size += len(frame)
            if count <= session_data.SIGNED_FRAMES + session_data.MAX_BLOBS and size <= self.max_bytes:
                frames.append(frame)
            elif frames:
                frames = []  # over the limit: release what was kept
            more = frame.more
            del frame
            if not more:
                break
            frame = self._socket.recv(0, copy=False)  # the rest of a message is there once its first frame is
        if count > session_data.SIGNED_FRAMES + session_data.MAX_BLOBS or size > self.max_bytes:
            self.dropped += 1
            return None
        return frames

    def sent_by(self, worker: int) -> bool:
        """Did the last message ``receive`` returned come with ``worker``'s key? (Always, without CurveZMQ: a
        local session's socket is a Unix socket only the user's processes can open.)"""
        return self.curve is None or self.curve.speaks_for(self.last_sender, worker)

    def close(self) -> None:
        """After the pending pulls were failed: their reader lets go of ``lock`` within one poll."""
        with self.lock:
            self._close()

    def _close(self) -> None:
        if self.curve is not None:
            self.curve.close()
        self._socket.close(linger=0)
        self._context.term()
        if self.shm is not None:
            self.shm.sweep(close=True)

    def shm_path(self, request: str, gen: int) -> str | None:
        """Where the worker puts its reply to ``request`` in shared memory (local sessions; None: frames). The
        first pull from new processes (``gen``) removes what the old ones left (their spare files: killed)."""
        if self.shm is None:
            return None
        if gen != self._gen:
            self._gen = gen
            self.shm.sweep()
        return str(self.shm.path("pull", request))

    def open_reply(self, content: dict[str, Any], size: int | None) -> memoryview:
        """A reply's shared-memory file (``session_data.unpack``'s ``open_shm``): the one named after its request
        in this channel's folder, mapped (``size``) or only removed (None)."""
        if self.shm is None:
            raise session_shm.ShmError("this session's workers are not local: no shared memory")
        path = self.shm.path("pull", str(content.get("request")))
        if size is None:
            self.shm.discard(path)
            return memoryview(b"")
        return session_shm.open_mapped(path, size)
