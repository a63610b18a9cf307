"""The host's side of a zygote (``nbworkers.distlib.worker.zygote``): ask it to fork this host's worker.

``fork_worker(socket_path, timeout, log)`` passes the write end of a new pipe (SCM_RIGHTS) and the host's
environment and directory (the worker's, as the kernel started the host with them), and returns a
``ForkedWorker`` that the host uses exactly as the ``subprocess.Popen`` of a spawned worker: ``pid`` (its own
session and process group), ``stdout`` (the pipe's read end), ``wait()`` (the exit code the zygote reports).
On any failure — no zygote, it died, it refused (TensorFlow's runtime started in it), no answer within
``timeout`` — it writes why into the worker's log and returns None: the host then spawns the worker.

Before the environment (the run's keys included) leaves, ``check_peer`` asks the kernel (``SO_PEERCRED``) who
is at the other end: a process of this user and, when the host was told the zygote's pid (``--zygote-pid``), that
very process. Anything else (another user who got a socket in place of the zygote's) is ``UntrustedZygote``:
nothing is sent, the note in the log says whose process it was, and the worker is spawned.

Imports only the standard library and ``host``'s helpers (no TensorFlow).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time

HEADER = struct.Struct("!Q")  # as in nbworkers.distlib.worker.zygote
EXIT_UNKNOWN = 1  # the zygote died before it could report the worker's exit: a failure, code unknown
CONNECT_RETRY = 0.05  # seconds between connection attempts to a zygote that is starting
GONE_POLL = 0.1  # seconds between checks that an orphaned worker is gone


class ForkedWorker:
    def __init__(self, conn: socket.socket, pid: int, out_r: int, rest: bytes):
        self.pid = pid
        self.stdout = os.fdopen(out_r, "rb", buffering=0)
        self.stdin = None
        self.returncode: int | None = None
        self._conn = conn
        self._buffer = rest

    def wait(self) -> int:
        if self.returncode is not None:
            return self.returncode
        while b"\n" not in self._buffer:
            try:
                chunk = self._conn.recv(256)
            except OSError:
                chunk = b""
            if not chunk:
                break
            self._buffer += chunk
        self._conn.close()
        line = self._buffer.split(b"\n", 1)[0].decode(errors="replace").split()
        if len(line) == 2 and line[0] == "exit" and line[1].lstrip("-").isdigit():
            self.returncode = int(line[1])
        else:  # the zygote died: the worker (now init's child) is watched until it is gone
            from nbworkers.procs.kill import group_alive  # lazily: psutil, only when a zygote died

            while group_alive(self.pid):
                time.sleep(GONE_POLL)
            self.returncode = EXIT_UNKNOWN
        return self.returncode


def _note(log, text: str) -> None:
    if log is not None:
        try:
            log.write(f"--- nbworkers: {text}\n".encode())
        except (OSError, ValueError):
            pass


class UntrustedZygote(ConnectionError):
    """The process at the zygote's socket is not this user's zygote."""


PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a connected Unix socket (Linux ``SO_PEERCRED``)."""
    return PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEERCRED.size))


def check_peer(conn: socket.socket, expected_pid: int | None) -> None:
    """UntrustedZygote unless the peer is a process of this user and, given ``expected_pid``, that process."""
    pid, uid, _gid = peer_credentials(conn)
    if uid != os.getuid():
        raise UntrustedZygote(f"the process at the zygote's socket (pid {pid}) belongs to user id {uid}, not to you "
                              f"({os.getuid()}): nothing was sent to it")
    if expected_pid is not None and pid != expected_pid:
        raise UntrustedZygote(f"the process at the zygote's socket is pid {pid}, not the zygote {expected_pid} "
                              "the kernel started: nothing was sent to it")


def _connect(conn: socket.socket, socket_path: str, connect_timeout: float) -> None:
    """Connect, retrying while the zygote (started a moment ago) has not bound its socket yet."""
    deadline = time.monotonic() + connect_timeout
    while True:
        try:
            conn.connect(socket_path)
            return
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(CONNECT_RETRY)


def fork_worker(socket_path: str, timeout: float, log, connect_timeout: float = 15.0,
                expected_pid: int | None = None) -> ForkedWorker | None:
    """A worker forked by the zygote at ``socket_path`` (pid ``expected_pid`` when known), or None (with a note in
    ``log``): spawn it instead."""
    out_r, out_w = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout)
        _connect(conn, socket_path, connect_timeout)
        check_peer(conn, expected_pid)
        body = json.dumps({"env": dict(os.environ), "cwd": os.getcwd()}).encode()
        socket.send_fds(conn, [HEADER.pack(len(body))], [out_w])
        conn.sendall(body)
        os.close(out_w)
        out_w = -1
        reply = b""
        while b"\n" not in reply:
            chunk = conn.recv(256)
            if not chunk:
                raise ConnectionError("the zygote closed the connection (it died)")
            reply += chunk
        line, _, rest = reply.partition(b"\n")
        words = line.decode(errors="replace").split(" ", 1)
        if words[0] == "pid" and len(words) == 2 and words[1].isdigit():
            conn.settimeout(None)
            return ForkedWorker(conn, int(words[1]), out_r, rest)
        raise ConnectionError(f"the zygote refused: {words[-1]}" if words[0] == "refused" else f"bad reply {line!r}")
    except (OSError, ValueError) as error:
        reason = "no answer in time" if isinstance(error, socket.timeout) else str(error) or repr(error)
        _note(log, f"zygote unavailable ({reason}); spawning this worker instead (TensorFlow is imported anew)")
        conn.close()
        os.close(out_r)
        if out_w != -1:
            os.close(out_w)
        return None
