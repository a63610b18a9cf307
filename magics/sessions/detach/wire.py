"""The private channel between a detached session's supervisor process and a kernel: signed data messages
(``protocol/session_data.py``: HMAC-signed JSON, then raw frames under a Poly1305 MAC, never pickle) over a Unix
stream socket, each message framed as a count of frames, then each frame's length and bytes.

The socket is a 0600 file in the user's private runtime directory (0700); where it is and the channel's key are in
the run directory's ``session-client.json`` (0600), which only the run's owner can read. Every request and reply is
signed with that key and checked before anything in it is used; what is read is bounded before it is read
(``MAX_FRAMES`` frames, ``max_bytes`` bytes), so a peer can make neither side hold more than that.
"""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path
from typing import Any, Sequence

from nbworkers.magics.rundir.layout import SESSION_CLIENT_FILE
from nbworkers.protocol import session_data, wire
from nbworkers.protocol.private.dirs import write_private
from nbworkers.protocol.private.files import read_own

CLIENT_FILE = SESSION_CLIENT_FILE  # in the run directory: the socket's path and the channel's key (0600)
MAX_FRAMES = session_data.SIGNED_FRAMES + session_data.MAX_BLOBS  # a pulled value: two frames an array
COUNT = struct.Struct("!I")
LENGTH = struct.Struct("!Q")


class ChannelError(ConnectionError):
    """The peer closed the connection, or sent what the channel refuses (too big, malformed, unsigned)."""


def write_client_file(run_dir: Path, socket_path: Path, key: str) -> None:
    write_private(Path(run_dir) / CLIENT_FILE, json.dumps({"socket": str(socket_path), "key": key}).encode())


def read_client_file(run_dir: Path) -> tuple[str, str]:
    """The socket's path and the key (``ChannelError`` when the file is missing, not this user's, or malformed)."""
    try:
        data = json.loads(read_own(Path(run_dir) / CLIENT_FILE))
        return str(data["socket"]), str(data["key"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ChannelError(f"the detached session's channel file in {run_dir} cannot be read ({error})") from None


def send(sock: socket.socket, key: str, signer: wire.Signer, kind: str, content: dict[str, Any],
         blobs: Sequence[Any] = ()) -> None:
    frames = session_data.pack(key, signer, kind, content, list(blobs))
    parts = [COUNT.pack(len(frames))]
    for frame in frames:
        data = bytes(frame)
        parts.append(LENGTH.pack(len(data)))
        parts.append(data)
    sock.sendall(b"".join(parts))


def receive(sock: socket.socket, key: str, max_bytes: int) -> tuple[str, dict[str, Any], list[Any]]:
    """One message: its kind, its content, its blobs (``ChannelError`` when it is refused or the peer closed)."""
    count = COUNT.unpack(_exactly(sock, COUNT.size))[0]
    if not session_data.SIGNED_FRAMES <= count <= MAX_FRAMES:
        raise ChannelError(f"a message of {count} frames (at most {MAX_FRAMES})")
    frames: list[bytes] = []
    total = 0
    limit = max_bytes + session_data.MAX_JSON_BYTES
    for _ in range(count):
        length = LENGTH.unpack(_exactly(sock, LENGTH.size))[0]
        total += length
        if total > limit:
            raise ChannelError(f"a message of more than {limit} bytes")
        frames.append(_exactly(sock, length))
    try:
        return session_data.unpack(frames, key, max_bytes)
    except session_data.DataError as error:
        raise ChannelError(f"refused a message: {error}") from None


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ChannelError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
