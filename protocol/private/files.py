"""Files a worker reads from its run directory, opened so that no one else can slip theirs in, and the signed push.

A run directory is private (0700, ``magics/rundir/prepare.py``) under a checked run root, but a worker still
opens its files as if it were not, so that a swapped directory or a planted link is caught where it is used:

- ``open_own(path, flags)``: ``os.open`` with ``O_NOFOLLOW`` (a symlink at ``path`` fails) and ``O_NONBLOCK``
  (a FIFO planted there does not hang the open), then ``fstat`` on the open descriptor: a regular file owned by
  this user (the descriptor is then made blocking again), or ``UnsafeFile`` (the message names the file and
  what to do). The worker's ``cell.py``, ``push.pkl`` and the host's log go through it.
- ``sign_push(key, payload)`` / ``verify_push(key, data)``: ``push.pkl`` is the pickled variables behind a
  header and an HMAC-SHA256 of them under the run's relay key (``NBWORKERS_KEY``, which every worker of the run
  already has). The worker checks it before ``pickle.loads``: a file the kernel did not write is
  ``BadPushSignature`` and nothing of it is unpickled.

Imports only the standard library (the worker's bootstrap and the host import it).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat

PUSH_HEADER = b"nbworkers-push hmac-sha256\n"
DIGEST_BYTES = hashlib.sha256().digest_size


class UnsafeFile(OSError):
    """A run file that is a symlink, not a regular file, or not owned by this user."""


class BadPushSignature(ValueError):
    """``push.pkl`` does not carry the run's signature: not written by this run's kernel, or changed since."""


def open_own(path: str | os.PathLike, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """A descriptor on ``path``, refusing symlinks (``O_NOFOLLOW``) and files that are not this user's own
    regular files (``fstat`` on what was opened, so nothing can be swapped between the check and the use)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as error:
        if os.path.islink(path):
            raise UnsafeFile(f"{path} is a symlink: nbworkers only opens the run's own files. Remove it and run the "
                             "cell again.") from error
        if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):  # a FIFO with no reader: ENXIO
            raise UnsafeFile(f"{path} is not a regular file: remove it and run the cell again.") from error
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(f"{path} is not a regular file: remove it and run the cell again.")
        if info.st_uid != os.getuid():
            raise UnsafeFile(f"{path} belongs to user id {info.st_uid}, not to you ({os.getuid()}): someone else "
                             "wrote it. nbworkers will not use it; check who can write to the run root.")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_own(path: str | os.PathLike) -> bytes:
    """The bytes of this user's own regular file ``path`` (``open_own``)."""
    with os.fdopen(open_own(path), "rb") as file:
        return file.read()


def _mac(key: str, payload: bytes) -> bytes:
    return hmac.new(key.encode("ascii"), payload, hashlib.sha256).digest()


def sign_push(key: str, payload: bytes) -> bytes:
    """``push.pkl``'s content: the header, the HMAC of ``payload`` under the run's key, then ``payload``."""
    return PUSH_HEADER + _mac(key, payload) + payload


def verify_push(key: str, data: bytes) -> bytes:
    """The payload of a signed ``push.pkl``; ``BadPushSignature`` unless this run's kernel wrote it."""
    if not key:
        raise BadPushSignature("the worker has no run key (NBWORKERS_KEY) to check the pushed variables with")
    body = data[len(PUSH_HEADER):]
    if not data.startswith(PUSH_HEADER) or len(body) < DIGEST_BYTES:
        raise BadPushSignature("the pushed variables (push.pkl) carry no signature: not written by this run's kernel;"
                               " nothing was unpickled")
    mac, payload = body[:DIGEST_BYTES], body[DIGEST_BYTES:]
    if not hmac.compare_digest(mac, _mac(key, payload)):
        raise BadPushSignature("the pushed variables (push.pkl) do not carry this run's signature: the file was "
                               "replaced or changed after the kernel wrote it; nothing was unpickled")
    return payload
