"""A local session's array bytes through shared memory: one private file per data message, mapped by the receiver.

On the local backend the kernel and its workers are one user's processes on one machine, so a ``push`` or a
``pull`` of more than ``shm_min_bytes`` puts its blobs (the ``.npy`` headers and array bytes ``session_values``
makes, the same bytes the socket would carry) into one file instead of frames, and the signed message names it
(``session_data``: ``shm`` = the file's size, ``blobs`` = each blob's). ZeroMQ cannot pass a descriptor
(``SCM_RIGHTS``), so the file lives in a private directory (0700, ``dirs.runtime_dir``: under ``/dev/shm`` when
it is a tmpfs, else beside the sockets) for the moment between the sender's write and the receiver's open:

- ``write(path, blobs)``: ``O_CREAT|O_EXCL|O_NOFOLLOW``, mode 0600, one ``write`` per blob (one copy, in the
  OS), closed; removed again if anything fails.
- ``open_mapped(path, size)``: ``O_NOFOLLOW|O_NONBLOCK`` (a symlink or a FIFO there is refused), then
  ``fstat`` on what was opened: a regular file of this user, no access for group or others, one link, exactly
  ``size`` bytes; the file is unlinked at once (whatever it was), then mapped read-only (``PROT_READ``,
  ``MAP_POPULATE``). Arrays are ``np.frombuffer`` views of the mapping; they keep it alive, and it goes when
  the last of them does. Anything wrong raises ``ShmError`` saying what (the caller drops the offer and counts it).
- ``ShmFiles``: a channel's own names in that directory (``<prefix>-<what>-<token>``, the prefix
  ``<random>.<machine>.<pid>``: the machine and pid of the kernel, or detached supervisor, that made the channel),
  ``write`` through a spare unnamed file made ready ahead (see the class), and ``sweep()``, which removes what is
  left of them (a worker killed before it opened its push, a pull that failed): at a restart of the processes, at
  the first pull from new processes, and when the session ends.
- ``sweep_stale()``: what a process killed with ``kill -9`` left (its channels could not sweep), removed when the
  extension loads (rundir/leftovers.py): in this user's folder, the files whose maker, by the machine and pid in
  their names, is gone from this machine; the fall-back folders ``dirs.runtime_dir`` made beside a squatted
  ``/dev/shm/nbworkers-data-<uid>`` (``nbworkers-data-<uid>-<machine>-<pid>-<random>``) whose maker is gone, whole.
  Only this user's regular files and private folders, looked at and removed without following links; other
  machines' names, other users' folders (the squatter's) and live makers' are left alone.

The bytes are not MACed as frames are (``session_data.mac``): nothing but this user (or root) can open or
replace a 0600 file in a 0700 directory of theirs, and a second pass over the data would halve the rate.
Imports only the standard library.
"""

from __future__ import annotations

import mmap
import os
import re
import secrets
import stat
import threading
from pathlib import Path
from typing import Any, Sequence

from nbworkers.protocol.private import dirs
from nbworkers.protocol.private.machine import KEY_PATTERN, machine_key

DIR_NAME = "nbworkers-data"
SHM_BASE = "/dev/shm"
# <random>.<machine>.<pid>-<push|pull>-<token>: the maker of the channel's prefix (ShmFiles), for sweep_stale
NAME = re.compile(rf"^[0-9a-f]{{12}}\.(?P<machine>{KEY_PATTERN})\.(?P<pid>[0-9]{{1,10}})-(push|pull)-[0-9a-f]{{32}}$")
FALLBACK = re.compile(rf"^{DIR_NAME}-(?P<uid>[0-9]+)-(?P<machine>{KEY_PATTERN})-(?P<pid>[0-9]{{1,10}})-[A-Za-z0-9_]+$")
SPARE_MAX_BYTES = 256 << 20  # a message up to this size leaves a spare (unnamed) file of its size for the next


class ShmError(ValueError):
    """A shared-memory offer was refused: missing, not this user's private regular file, or of the wrong size."""


def data_dir() -> Path:
    """The private directory the files go in: ``/dev/shm/nbworkers-data-<uid>`` when ``/dev/shm`` is there (a
    tmpfs: memory), else the runtime directory the sockets are in."""
    if os.path.isdir(SHM_BASE):
        try:
            return dirs.runtime_dir(DIR_NAME, base=SHM_BASE)
        except OSError:
            pass
    return dirs.runtime_dir(DIR_NAME)


def write(path: str | os.PathLike, blobs: Sequence[Any]) -> int:
    """Write ``blobs`` one after the other into the new file ``path`` (0600, exclusive, no symlink followed);
    returns its size."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    size = 0
    try:
        for blob in blobs:
            view = memoryview(blob).cast("B")
            size += view.nbytes
            while view:
                view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        _unlink(path)
        raise
    os.close(fd)
    return size


def open_mapped(path: str | os.PathLike, size: int) -> memoryview:
    """The file ``path`` of ``size`` bytes (checked as the module says), unlinked and mapped read-only."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ShmError(f"{path} is missing (its sender went away, or it was already taken)") from None
    except OSError as error:
        kind = "a symlink" if os.path.islink(path) else "not a file that can be opened"
        _unlink(path)
        raise ShmError(f"{path} is {kind} ({error.strerror}): refused") from None
    try:
        info = os.fstat(fd)  # (before the unlink: its links as they were)
        _unlink(path)  # from here on no one else can open it
        problem = _problem(info, size)
        if problem:
            raise ShmError(f"{path} {problem}: refused")
        if size == 0:
            return memoryview(b"")
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        return memoryview(mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ))
    finally:
        os.close(fd)


def _problem(info: os.stat_result, size: int) -> str:
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_uid != os.getuid():
        return f"belongs to user id {info.st_uid}, not to you ({os.getuid()})"
    if stat.S_IMODE(info.st_mode) & 0o077:
        return f"is open to other users (mode {stat.S_IMODE(info.st_mode):o}, not 600)"
    if info.st_nlink > 1:
        return f"has {info.st_nlink} links (another name could change it)"
    if info.st_size != size:
        return f"holds {info.st_size} bytes, not the {size} its message declares"
    return ""


def split(view: memoryview, sizes: Sequence[int]) -> list[memoryview]:
    """The blobs of ``sizes`` bytes, one after the other in ``view`` (views, not copies)."""
    blobs, at = [], 0
    for size in sizes:
        blobs.append(view[at:at + size])
        at += size
    return blobs


def discard(path: str | os.PathLike) -> None:
    """Remove ``path`` if it is there."""
    _unlink(path)


def _unlink(path: str | os.PathLike) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class ShmFiles:
    """One channel's files in ``folder`` (default ``data_dir()``): new names, writes, and removal of what is left.

    ``write`` keeps one spare file ready, unnamed (``O_TMPFILE``, made in a thread after each write, the size of
    the last message, its pages allocated with ``posix_fallocate``): the next message of up to that size is
    written into it and only then linked under the message's name (``linkat`` of ``/proc/self/fd/N``). On this
    project's 2-core VM allocating tmpfs pages costs about as much as copying into them, so a repeated push or
    pull of similar arrays pays the copy alone. An unnamed file leaves nothing behind: it goes with its process."""

    def __init__(self, folder: str | os.PathLike | None = None, prefix: str | None = None):
        self.folder = Path(folder) if folder is not None else data_dir()
        self.prefix = prefix if prefix is not None else f"{secrets.token_hex(6)}.{machine_key()}.{os.getpid()}"
        self._lock = threading.Lock()
        self._spare: tuple[int, int] | None = None  # (descriptor of an unnamed file, its size)
        self._closed = False  # swept for good: no new spare

    def path(self, what: str, token: str | None = None) -> Path:
        """``<folder>/<prefix>-<what>-<token>`` (a fresh random token unless given: a pull's request id)."""
        token = token if token is not None else secrets.token_hex(16)
        name = f"{self.prefix}-{what}-{token}"
        if not NAME.match(name):
            raise ShmError(f"{name!r} is not a shared-memory file name")
        return self.folder / name

    def write(self, path: str | os.PathLike, blobs: Sequence[Any]) -> int:
        """``write(path, blobs)``, into the spare file when there is one big enough; then a new spare."""
        size = sum(memoryview(b).nbytes for b in blobs)
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is None or not _into_spare(spare, path, blobs, size):
            write(path, blobs)
        if 0 < size <= SPARE_MAX_BYTES:
            threading.Thread(target=self._make_spare, args=(size,), daemon=True, name="nbworkers-shm-spare").start()
        return size

    def _make_spare(self, size: int) -> None:
        """An unnamed file in the folder (``O_TMPFILE``: nothing to remove if this process dies) of ``size``
        allocated bytes; none where the file system cannot make one."""
        try:
            fd = os.open(self.folder, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except (OSError, AttributeError):
            return
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:
            os.close(fd)
            return
        with self._lock:
            old, self._spare = self._spare, (fd, size)
            if self._closed:
                old, self._spare = self._spare, None
        if old is not None:
            os.close(old[0])

    def discard(self, path: str | os.PathLike) -> None:
        discard(path)

    def left(self) -> list[Path]:
        """This channel's files still in the folder."""
        try:
            return [self.folder / n for n in os.listdir(self.folder) if n.startswith(self.prefix + "-")]
        except FileNotFoundError:
            return []

    def sweep(self, close: bool = False) -> int:
        """Remove this channel's files that are still there, and let go of the spare; returns how many.
        ``close``: for good (a spare being made meanwhile is let go of too)."""
        with self._lock:
            spare, self._spare = self._spare, None
            self._closed = self._closed or close
        if spare is not None:
            os.close(spare[0])
        left = self.left()
        for path in left:
            _unlink(path)
        return len(left)


def _into_spare(spare: tuple[int, int], path: str | os.PathLike, blobs: Sequence[Any], size: int) -> bool:
    """Write ``blobs`` into the unnamed spare file and link it as ``path``; False (nothing named) if it cannot."""
    fd, allocated = spare
    try:
        if allocated < size:
            return False
        if allocated > size:
            os.ftruncate(fd, size)
        at = 0
        for blob in blobs:
            view = memoryview(blob).cast("B")
            while view:
                written = os.pwrite(fd, view, at)
                view, at = view[written:], at + written
        folder = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:  # (a dir_fd makes CPython call linkat with AT_SYMLINK_FOLLOW; plain link() would not follow)
            os.link(f"/proc/self/fd/{fd}", os.path.basename(path), src_dir_fd=folder, dst_dir_fd=folder)
        finally:
            os.close(folder)
        return True  # the unnamed file has its name now
    except OSError:
        return False
    finally:
        os.close(fd)


def offered(path: Any) -> Path:
    """A file named in a signed message (a push's ``shm_path``): one of ``ShmFiles``' names, in a private
    directory of this user's; ``ShmError`` otherwise."""
    if not isinstance(path, str) or not NAME.match(os.path.basename(path)):
        raise ShmError(f"{str(path)[:200]!r} is not a shared-memory file name")
    try:
        dirs.check_private(Path(os.path.dirname(path)))
    except OSError as error:
        raise ShmError(f"{path}: {error}") from None
    return Path(path)


def open_named(content: dict[str, Any], size: int | None) -> memoryview:
    """The file a signed message names (``shm_path``, ``offered``): mapped (``open_mapped``), or only removed when
    ``size`` is None (``session_data.unpack``'s ``open_shm``, on the workers' side of a push)."""
    path = offered(content.get("shm_path"))
    if size is None:
        discard(path)
        return memoryview(b"")
    return open_mapped(path, size)


# ------------------------------------------------------------------------------------------ leftovers of dead makers
def sweep_stale(base: str = SHM_BASE) -> list[str]:
    """Remove what dead makers of this machine left (see the module's text); returns the names removed (files as
    ``folder/name``, fall-back folders by their name)."""
    removed: list[str] = []
    if not os.path.isdir(base):
        try:
            folder = dirs.runtime_dir(DIR_NAME)  # the data folder when there is no /dev/shm
        except OSError:
            return removed
        return [f"{folder}/{name}" for name in _sweep_files(folder)]
    own = os.path.join(base, f"{DIR_NAME}-{os.getuid()}")
    removed += [f"{own}/{name}" for name in _sweep_files(own)]
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        match = FALLBACK.match(entry.name)
        if match is None or int(match["uid"]) != os.getuid() or not _dead_here(match):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not stat.S_IMODE(info.st_mode) & 0o077:
            _sweep_files(entry.path, everything=True)
            try:
                os.rmdir(entry.path)
                removed.append(entry.name)
            except OSError:  # something not ours in it, or made meanwhile: left
                pass
    return removed


def _sweep_files(folder: str | os.PathLike, everything: bool = False) -> list[str]:
    """In the private folder ``folder`` of this user (opened without following a link, checked on what was opened),
    remove this user's regular files named by a dead maker of this machine (``everything``: every such file of
    this user, a dead maker's fall-back folder); their names."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    removed: list[str] = []
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
            return []  # not ours alone (a squatter's): nothing in it is touched
        for entry in os.scandir(fd):
            match = NAME.match(entry.name)
            if not everything and (match is None or not _dead_here(match)):
                continue
            try:
                found = entry.stat(follow_symlinks=False)
                if not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid():
                    continue
                os.unlink(entry.name, dir_fd=fd)
            except OSError:
                continue
            removed.append(entry.name)
    finally:
        os.close(fd)
    return removed


def _dead_here(match: re.Match) -> bool:
    """The name's maker ran on this machine and is gone (a pid another user's process has now counts as alive)."""
    if match["machine"] != machine_key():
        return False
    try:
        os.kill(int(match["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False
