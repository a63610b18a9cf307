"""Private runtime directories under a shared temp dir, and Python command lines that cannot be hijacked there.

A directory nbworkers makes under ``/tmp`` (the zygotes' working directory, sockets and logs, the Ray node's
run root) must be ours alone: another local user who creates it first would own whatever
is put in it — and a planted ``argparse.py`` in a Python child's working directory runs as us when that
directory is on ``sys.path``. So:

- ``private_dir(path)`` creates ``path`` with mode 0700, or, when it already exists, accepts it only when
  ``os.lstat`` says: a directory (not a symlink), owned by this user, no access for group or others. Anything
  else raises ``UnsafeDirectory`` (the message says what is wrong and what to do).
- ``owned_root(path)`` is the same check for a root folder that may be readable by others but writable by this
  user alone (the run root): not a symlink, ours, not group- or world-writable, and no parent that another
  user could rename it through.
- ``check_importable(path)``: a working directory that goes first on ``sys.path`` (a Ray node's copy of the
  kernel's): this user's or root's, not writable by group or others, its parents checked as above.
- ``runtime_dir(name)`` is ``$NBWORKERS_RUNTIME_DIR/<name>-<uid>`` when that is set, else the directory ``name``
  under ``$XDG_RUNTIME_DIR`` (per-user by definition) when that is set and private, else
  ``<tempdir>/<name>-<uid>``; when that one is unsafe it falls back to a fresh ``tempfile.mkdtemp`` (private by
  construction) and warns once. The folders above it are checked as ``owned_root``'s are (a ``TMPDIR`` another
  user may write to without the sticky bit, as on some HPC scratch file systems, is ``UnsafeRuntimeBase``: the
  message says to set ``NBWORKERS_RUNTIME_DIR``).
- ``socket_path(name, file_name)``: a Unix socket's path in ``runtime_dir(name)``, short enough for a socket
  (107 bytes), else under ``/tmp``.
- ``module_command(python, module, ...)`` starts ``python -m module`` so that no working or temp directory
  lands on ``sys.path`` ahead of the standard library: ``-P`` when the interpreter is this one (3.11+),
  else a ``-c`` prelude that drops the ``''`` entry before anything but ``sys`` is imported (any version).

A fall-back folder is named ``<name>-<uid>-<machine>-<pid>-<random>`` (``fallback_prefix``): its maker's machine
(``machine.machine_key``) and pid, so that a sweep can tell one whose maker is gone (``session_shm.sweep_stale``).

Imports nothing beyond the standard library, ``env_settings`` and ``machine`` (the worker host and the Ray node
import it).
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import tempfile
import threading
from pathlib import Path

from nbworkers.protocol import env_settings
from nbworkers.protocol.private.machine import machine_key

log = logging.getLogger("nbworkers")

PRIVATE_MODE = 0o700

# `python -c` puts '' (the working directory) first on sys.path; drop it before importing anything that could
# be shadowed, then run the module as `-m` would (``alter_sys``: argv[0], sys.modules['__main__']).
SAFE_MODULE_PRELUDE = (
    "import sys\n"
    "if sys.path[:1] == ['']: del sys.path[0]\n"
    "import runpy\n"
    "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
)


class UnsafeDirectory(OSError):
    """A directory that should be private to this user is not (another owner, a symlink, open permissions)."""


def check_private(path: Path, open_bits: int = 0o077, mode_hint: str = "700") -> None:
    """Raise UnsafeDirectory unless ``path`` is a real directory (``lstat``: not a symlink) owned by this user
    with none of ``open_bits`` in its mode (default: no access at all for group or others, mode 0700)."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeDirectory(f"{path} is a symlink, not a directory of ours: remove it (`rm {path}`).")
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectory(f"{path} is not a directory: remove it (`rm {path}`).")
    if info.st_uid != os.getuid():
        raise UnsafeDirectory(
            f"{path} belongs to user id {info.st_uid}, not to you ({os.getuid()}): someone else may control what is "
            "in it. nbworkers will not use it; ask its owner or an administrator to remove it."
        )
    if stat.S_IMODE(info.st_mode) & open_bits:
        raise UnsafeDirectory(
            f"{path} is open to other users (mode {stat.S_IMODE(info.st_mode):o}): nbworkers only uses private "
            f"directories (mode {mode_hint}). Remove it (`rm -r {path}`) or `chmod {mode_hint} {path}` if you "
            "trust its contents."
        )


def check_ancestors(path: Path) -> None:
    """Raise UnsafeDirectory when another user could rename or replace ``path`` through one of its parents: each
    must be owned by this user or root and, when group or others may write to it, carry the sticky bit
    (as ``/tmp`` does: then only an entry's owner may rename it)."""
    parent_dir = Path(os.path.realpath(path.parent))
    for parent in [*reversed(parent_dir.parents), parent_dir]:
        info = os.stat(parent)
        if info.st_uid not in (0, os.getuid()):
            raise UnsafeDirectory(f"{path} lies inside {parent}, which belongs to user id {info.st_uid}: they could "
                                  "replace it. Use a folder inside your home directory.")
        if stat.S_IMODE(info.st_mode) & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise UnsafeDirectory(f"{path} lies inside {parent}, which other users may write to (mode "
                                  f"{stat.S_IMODE(info.st_mode):o}, no sticky bit): they could rename it and put "
                                  f"their own in its place. `chmod o-w,g-w {parent}` or use another folder.")


def check_importable(path: str | os.PathLike) -> Path:
    """``path`` (a working directory that goes first on ``sys.path``), resolved, when no one but this user (or
    root) can put a file in it: owned by this user or root, not writable by group or others (a sticky bit does
    not help: anyone may still add a module), and no parent another user could swap it through
    (``check_ancestors``). UnsafeDirectory otherwise, naming the folder and the fix."""
    real = Path(os.path.realpath(path))
    info = os.stat(real)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectory(f"{real} is not a directory")
    if info.st_uid not in (0, os.getuid()):
        raise UnsafeDirectory(f"{real} belongs to user id {info.st_uid}, not to you ({os.getuid()}): its modules "
                              "would run as you. Use a directory of your own.")
    if stat.S_IMODE(info.st_mode) & 0o022:
        raise UnsafeDirectory(f"{real} may be written by other users (mode {stat.S_IMODE(info.st_mode):o}): a module "
                              f"they put there would run as you. `chmod go-w {real}` or use another directory.")
    check_ancestors(real)
    return real


def owned_root(path: str | os.PathLike) -> Path:
    """A root folder that only this user can change (the run root): made (with its missing parents) mode 0700 if
    absent, whatever the umask; else a real directory owned by this user, not writable by group or others, whose
    parents no other user can rename it through. UnsafeDirectory otherwise (the message names the folder and the
    fix)."""
    path = Path(path)
    missing = []
    for folder in [path, *path.parents]:
        if os.path.lexists(folder):
            break
        missing.append(folder)
    for folder in reversed(missing):  # each one 0700 (makedirs would give the parents the umask's mode)
        try:
            os.mkdir(folder, PRIVATE_MODE)
            os.chmod(folder, PRIVATE_MODE)
        except FileExistsError:
            pass
    check_private(path, open_bits=0o022, mode_hint="700")
    check_ancestors(path)
    return path


def private_dir(path: str | os.PathLike) -> Path:
    """``path`` as a private directory: made with mode 0700 if absent (its parent must exist), else checked."""
    path = Path(path)
    try:
        os.mkdir(path, PRIVATE_MODE)
        os.chmod(path, PRIVATE_MODE)  # mkdir's mode is filtered by the umask; never looser than 0700 anyway
    except FileExistsError:
        pass
    check_private(path)
    return path


_fallbacks: dict[tuple[str, str], Path] = {}
_fallback_lock = threading.Lock()


RUNTIME_DIR_ENV = env_settings.RUNTIME_DIR.name  # a base for the private runtime directories, ahead of XDG / TMPDIR


class UnsafeRuntimeBase(UnsafeDirectory):
    """The folder runtime directories would be made in can be swapped by another user (a parent of it is
    another user's, or group- or world-writable without the sticky bit)."""


def _safe_base(base: Path, name: str) -> None:
    """Raise UnsafeRuntimeBase unless nothing made in ``base`` can be renamed or replaced by another user."""
    try:
        check_ancestors(base / name)
    except UnsafeDirectory as error:
        raise UnsafeRuntimeBase(
            f"nbworkers will not make its private runtime directory {name} under {base}: {error} Set "
            f"{RUNTIME_DIR_ENV} (or TMPDIR) to a directory only you can write to, e.g. `mkdir -m 700 "
            f"~/.nbworkers-run && export {RUNTIME_DIR_ENV}=~/.nbworkers-run` before starting the kernel (or "
            f"`%env {RUNTIME_DIR_ENV}=...` in it)."
        ) from error


def runtime_dir(name: str, base: str | os.PathLike | None = None) -> Path:
    """A private directory for ``name`` (``nbworkers-zygote``, ``nbworkers-ray``, ...), the same one every time
    in this process: ``$NBWORKERS_RUNTIME_DIR/name-<uid>``, ``$XDG_RUNTIME_DIR/name`` or ``<tempdir>/name-<uid>``,
    else a fresh ``mkdtemp`` there. Every folder above it must be root's or ours and, when others may write to it,
    sticky: else ``UnsafeRuntimeBase`` (the message says what to set), since another user could swap whatever
    is made there."""
    if base is None:
        explicit = env_settings.RUNTIME_DIR.get()
        if explicit:
            base = owned_root(os.path.expanduser(explicit))  # the user's choice: made 0700, or refused saying why
        else:
            xdg = os.environ.get("XDG_RUNTIME_DIR")
            if xdg:
                try:
                    check_private(Path(xdg))
                    check_ancestors(Path(xdg))
                    return private_dir(Path(xdg) / name)
                except (UnsafeDirectory, OSError):
                    pass
            base = tempfile.gettempdir()
    _safe_base(Path(base), name)
    wanted = Path(base) / f"{name}-{os.getuid()}"
    try:
        return private_dir(wanted)
    except (UnsafeDirectory, OSError) as error:
        key = (str(base), name)
        with _fallback_lock:
            if key not in _fallbacks:
                _fallbacks[key] = Path(tempfile.mkdtemp(prefix=fallback_prefix(name), dir=base))
                log.warning("nbworkers: not using %s (%s); using %s instead", wanted, error, _fallbacks[key])
            return _fallbacks[key]


def fallback_prefix(name: str) -> str:
    """The start of the name of ``runtime_dir(name)``'s fall-back folders made by this process (``mkdtemp`` adds
    random characters): ``<name>-<uid>-<machine>-<pid>-``."""
    return f"{name}-{os.getuid()}-{machine_key()}-{os.getpid()}-"


UNIX_SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path (Linux sockaddr_un.sun_path, less its NUL)


def socket_path(name: str, file_name: str) -> Path:
    """Where a Unix socket ``file_name`` goes: in ``runtime_dir(name)``, or in a private directory under /tmp when
    that one's path is too long for a socket (a deep ``$TMPDIR`` or ``$XDG_RUNTIME_DIR``)."""
    path = runtime_dir(name) / file_name
    if len(os.fsencode(path)) > UNIX_SOCKET_PATH_MAX:
        path = runtime_dir(name, base="/tmp") / file_name
    return path


def module_command(python: str, module: str, *args: str, unbuffered: bool = False) -> list[str]:
    """``python -m module args`` with no working or temp directory on ``sys.path`` ahead of the stdlib."""
    flags = ["-u"] if unbuffered else []
    if os.path.realpath(python) == os.path.realpath(sys.executable) and sys.version_info >= (3, 11):
        return [python, "-P", *flags, "-m", module, *args]
    return [python, *flags, "-c", SAFE_MODULE_PRELUDE.format(module=module), *args]


def write_private(path: str | os.PathLike, data: bytes, exclusive: bool = False) -> None:
    """Write ``data`` to ``path`` readable by this user only (0600, even when the file was there with a looser
    mode). ``exclusive``: fail if it exists."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | (os.O_EXCL if exclusive else 0)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
