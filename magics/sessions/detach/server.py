"""The detached session's server in its supervisor process: a Unix stream socket (0600, in the user's private
runtime directory) a kernel connects to, one thread per connection answering its requests in turn
(``handlers.py``), every message signed with a key of its own (``wire.py``). Where it is and its key go into the
run directory's ``session-client.json`` (0600); ``close()`` removes both, so nothing of it outlives the run.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

from nbworkers.magics.run import sockets
from nbworkers.magics.rundir.layout import remove_session_client
from nbworkers.magics.sessions.detach import wire as channel
from nbworkers.protocol import wire

REQUEST_MAX_BYTES = 2**30  # a request's frames (a push's arrays), before push_max_bytes applies per worker

Handler = Callable[[str, dict[str, Any], Sequence[Any]], tuple[dict[str, Any], list[Any]]]


class SessionServer:
    def __init__(self, name: str, run_dir: Path, handler: Handler, max_bytes: int = REQUEST_MAX_BYTES):
        self.name, self.run_dir, self._handler, self._max_bytes = name, Path(run_dir), handler, max_bytes
        self.key = wire.new_key()
        self._signer = wire.Signer(self.key)
        self.path = sockets.ipc_path("session")
        self._listener: socket.socket | None = None
        self._closed = threading.Event()

    def start(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket file is 0600 from its creation on
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        listener.listen(16)
        self._listener = listener
        channel.write_client_file(self.run_dir, self.path, self.key)
        threading.Thread(target=self._accept, daemon=True, name=f"nbworkers-session-server-{self.name}").start()

    def close(self) -> None:
        """Stop taking connections; remove the socket and the client file."""
        self._closed.set()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        remove_session_client(self.run_dir)

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            if not _same_user(connection):
                connection.close()
                continue
            threading.Thread(target=self._serve, args=(connection,), daemon=True,
                             name=f"nbworkers-session-client-{self.name}").start()

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            while not self._closed.is_set():
                try:
                    kind, content, blobs = channel.receive(connection, self.key, self._max_bytes)
                except (channel.ChannelError, OSError):
                    return  # closed, or refused: the connection ends (the kernel says so)
                try:
                    answer, frames = self._handler(kind, content, blobs)
                except Exception:
                    traceback.print_exc(file=sys.stderr)  # a bug: in the run directory's supervisor.log
                    answer, frames = {"ok": False, "error": "the session's supervisor failed on this request (its "
                                      "supervisor.log says why)", "ended": False}, []
                try:
                    channel.send(connection, self.key, self._signer, "answer", answer, frames)
                except (OSError, ValueError):
                    return


def _same_user(connection: socket.socket) -> bool:
    """The peer runs as this user (SO_PEERCRED): the socket's mode says so already; this says it twice."""
    import struct

    try:
        _pid, uid, _gid = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                    struct.calcsize("3i")))
    except OSError:
        return False
    return uid == os.getuid()
