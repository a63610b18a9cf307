"""A kernel's client of a detached session's supervisor process (``server.py``): one request, one answer, over a
fresh connection to its socket each time, signed with the key in the run directory's ``session-client.json``.
An answer that is not ok raises ``SessionRefused`` (its ``ended``: the session takes no new work)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Sequence

from nbworkers.magics.sessions.detach import wire as channel
from nbworkers.protocol import wire

ANSWER_MAX_BYTES = 2**30  # bounds what is read; a pull's own limit (pull_max_bytes) is checked by the supervisor


class SessionRefused(RuntimeError):
    """The supervisor refused or could not do what was asked (its message says what to do)."""

    def __init__(self, message: str, ended: bool = False, error_type: str = ""):
        super().__init__(message)
        self.ended, self.error_type = ended, error_type


class SessionGone(SessionRefused):
    """The supervisor process cannot be reached: the session ended (or its supervisor died)."""


class SessionClient:
    def __init__(self, name: str, run_dir: Path, max_bytes: int = ANSWER_MAX_BYTES):
        self.name, self.run_dir, self.max_bytes = name, Path(run_dir), max_bytes

    def request(self, kind: str, content: dict[str, Any], blobs: Sequence[Any] = (),
                timeout: float | None = 30.0) -> tuple[dict[str, Any], list[Any]]:
        """Ask, wait at most ``timeout`` seconds for the answer (None: as long as it takes, as a pull after a long
        cell does); its content and blobs."""
        try:
            path, key = channel.read_client_file(self.run_dir)
        except channel.ChannelError:
            raise SessionGone(f"detached session {self.name!r} has ended (its channel is gone): "
                              f"`%%worker -n N --detach --session {self.name}` starts it again.", ended=True) from None
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                sock.connect(path)
                channel.send(sock, key, wire.Signer(key), kind, content, blobs)
                _kind, answer, frames = channel.receive(sock, key, self.max_bytes)
        except (OSError, channel.ChannelError) as error:
            raise SessionGone(f"detached session {self.name!r} did not answer ({error}); `%workers` says whether "
                              "it still runs.", ended=isinstance(error, (FileNotFoundError, ConnectionRefusedError)))
        if not answer.get("ok"):
            raise SessionRefused(str(answer.get("error") or "refused"), bool(answer.get("ended")),
                                 str(answer.get("error_type") or ""))
        return answer, list(frames)
