"""The kernel's ZMQ sockets that workers send to (the relay, a session's commands): where they bind, and how one
message is received within bounds.

- ``bind(socket, host, advertise, name)``: ``host == "ipc"`` (local runs) binds a Unix socket in the kernel's
  private runtime directory (``private_dirs.socket_path``, mode 0700; the socket file 0600): no TCP port, and
  no other user can even open it. Otherwise a TCP port ZMQ picks atomically on ``host`` (``--backend ray``,
  with CurveZMQ on top: ``relay_curve.py``).
- Over TCP the socket also bounds who has not authenticated yet: ``HANDSHAKE_IVL`` (``HANDSHAKE_SECONDS``,
  libzmq's default is 30 s) drops a connection that has not finished the CurveZMQ handshake by then, and
  ``BACKLOG`` (``PENDING_CONNECTIONS``) caps the connections waiting to be accepted. The bind address is the one
  the nodes are told when this machine has it, not every interface (``backends/ray/address.bind_host``).
- ``receive(socket, max_frames, max_bytes)``: one whole message, frame by frame (``copy=False``, ``RCVMORE``),
  keeping frames only while the message stays within ``max_frames`` frames and ``max_bytes`` bytes; the rest of
  an over-limit message is read and released at once, never joined into one list, and a ``TooBig`` says how big
  it was (the caller counts it). libzmq itself queues a message whole before its first frame can be read
  (each frame at most ``MAXMSGSIZE``, at most ``RCVHWM`` messages per connection): that queue is what only the
  user's own processes (ipc) or the run's authenticated nodes (CurveZMQ) can fill.
- ``ipc_path(name)``: where a Unix socket goes, its name carrying its binder's machine (``machine.machine_key``:
  host name and boot id) and pid; ``sweep_stale()`` removes the socket files of this machine whose binder is gone
  (a kernel, or a detached run's supervisor, killed with ``kill -9`` cannot remove its own). Files of other machines
  (a runtime directory on a shared home, ``NBWORKERS_RUNTIME_DIR=~/...``) and names without a machine (an older
  version's) are left alone: a pid says nothing about another machine's processes. The extension sweeps when it
  loads (rundir/leftovers.py).
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

import psutil
import zmq

from nbworkers.protocol.private.dirs import runtime_dir, socket_path
from nbworkers.protocol.private.machine import KEY_PATTERN, machine_key

IPC = "ipc"  # the bind host that means: a Unix socket in the private runtime directory
IPC_DIR_NAME = "nbworkers-ipc"
HANDSHAKE_SECONDS = 5.0  # a TCP peer that has not finished the handshake by then is dropped (libzmq: 30 s)
PENDING_CONNECTIONS = 16  # TCP connections waiting to be accepted (libzmq: 100)
# ipc_path's names: <what>-<machine>-<pid>-<token>.sock
IPC_NAME = re.compile(rf"-(?P<machine>{KEY_PATTERN})-(?P<pid>\d+)-[0-9a-f]{{12}}\.sock$")


@dataclass(frozen=True)
class TooBig:
    """A message over the limits, read and dropped: how many frames and bytes it had."""

    frames: int
    nbytes: int


def bind(socket: zmq.Socket, host: str, advertise: str | None, name: str) -> str:
    """Bind ``socket`` as described above; returns the address the workers connect to."""
    if host == IPC:
        path = ipc_path(name)
        socket.bind(f"ipc://{path}")
        os.chmod(path, 0o600)
        return f"ipc://{path}"
    socket.setsockopt(zmq.HANDSHAKE_IVL, int(HANDSHAKE_SECONDS * 1000))
    socket.setsockopt(zmq.BACKLOG, PENDING_CONNECTIONS)
    port = socket.bind_to_random_port(f"tcp://{host}")
    return f"tcp://{advertise or host}:{port}"


def ipc_path(name: str) -> Path:
    """A new Unix socket's path in the private runtime directory: ``<name>-<machine>-<this pid>-<random>.sock``."""
    return socket_path(IPC_DIR_NAME, f"{name}-{machine_key()}-{os.getpid()}-{secrets.token_hex(6)}.sock")


def sweep_stale(directory: Path | None = None) -> list[str]:
    """Remove the socket files of ``ipc_path`` (in ``directory``, by default the private runtime directory's) made on
    this machine whose binder is no longer alive; returns their names. Only this user's sockets, looked at without
    following links; another machine's names are never touched.
    A pid that is alive again (reused) keeps its file: it answers nobody, and the next sweep after that process
    ends removes it."""
    directory = directory if directory is not None else runtime_dir(IPC_DIR_NAME)
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        match = IPC_NAME.search(entry.name)
        if match is None or match["machine"] != machine_key():
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
                continue
            if psutil.pid_exists(int(match["pid"])):
                continue
            os.unlink(entry.path)
        except OSError:  # gone meanwhile
            continue
        removed.append(entry.name)
    return removed


def sender_of(frame: zmq.Frame) -> str:
    """The ZAP ``User-Id`` of the peer a received frame came from (CurveZMQ: its public key, Z85), or ""."""
    try:
        return str(frame.get("User-Id") or "")
    except zmq.ZMQError:  # no ZAP on this socket (ipc, plain TCP)
        return ""


def receive(socket: zmq.Socket, max_frames: int, max_bytes: int, flags: int = zmq.NOBLOCK) -> list[bytes] | TooBig:
    """One message as a list of frames, or ``TooBig``; raises ``zmq.Again`` when none is waiting."""
    return receive_from(socket, max_frames, max_bytes, flags)[0]


def receive_from(socket: zmq.Socket, max_frames: int, max_bytes: int,
                 flags: int = zmq.NOBLOCK) -> tuple[list[bytes] | TooBig, str]:
    """``receive``, and who sent it (``sender_of``: the CURVE client key, "" without ZAP)."""
    frame = socket.recv(flags, copy=False)
    sender = sender_of(frame)
    kept: list[bytes] = []
    count = size = 0
    while True:
        count += 1
        size += len(frame)
        if count <= max_frames and size <= max_bytes:
            kept.append(frame.bytes)
        elif kept:
            kept = []  # over the limit: release what was kept
        more = frame.more
        del frame
        if not more:
            break
        frame = socket.recv(0, copy=False)  # the rest of a message is there once its first frame is
    if count > max_frames or size > max_bytes:
        return TooBig(count, size), sender
    return kept, sender
