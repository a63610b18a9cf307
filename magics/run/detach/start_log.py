"""Where a detached run's supervisor process starts and what it writes to stderr (``%%worker --detach``).

The kernel starts the supervisor (``start.py``) in a folder of its own: ``start_dir`` makes a fresh private folder
(``mkdtemp``: 0700, made by this call alone) in the user's private runtime directory (``dirs.runtime_dir``),
never the notebook's folder, which other users may be able to write to. The supervisor runs there with ``-P``
(``dirs.module_command``), so neither that folder nor the notebook's is on its ``sys.path``; the cell's own folder
travels in the launch (``LaunchSpec.cwd``): the workers still run, and import the user's modules, there.

Its stderr is a file in that folder from its first instruction on (``open_log``: 0600, ``O_EXCL|O_NOFOLLOW``), so a
start that fails before the supervisor can answer (a broken install, an interpreter that cannot start, a crash)
leaves its trace, and the kernel's error quotes its end and names it (``failure_text``). Once the run is started
and its directory made, the supervisor moves to it (``adopt``): the run directory's ``supervisor.log`` (0600, no
link followed) gets what the start log held and every later line, the supervisor's working directory becomes the
run directory, and the start folder is removed. A refused launch leaves nothing (the kernel removes the folder:
``discard``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from nbworkers.protocol.private.dirs import check_private, runtime_dir

SUPERVISOR_LOG = "supervisor.log"  # in the start folder, then in the run directory: what the supervisor printed
START_DIR_NAME = "nbworkers-detach"  # the runtime directory the start folders are made in
TAIL_LINES = 20  # of the start log, quoted in the cell's error
TAIL_BYTES = 64 * 1024  # read from the start log's end for those lines
LOG_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC


def start_dir(name: str) -> Path:
    """A fresh private folder (0700) for one supervisor's start, named after the run."""
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=runtime_dir(START_DIR_NAME)))


def open_log(folder: Path) -> int:
    """A new file ``folder/supervisor.log`` (0600, exclusive, no link followed), open for appending: the
    supervisor's stderr until its run directory exists."""
    fd = os.open(folder / SUPERVISOR_LOG, LOG_FLAGS | os.O_EXCL, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path`` (opened without following a link), "" when there are none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        file.seek(max(0, size - TAIL_BYTES))
        text = file.read().decode("utf-8", "replace")
    return "\n".join(text.rstrip().splitlines()[-lines:])


def failure_text(what: str, folder: Path) -> str:
    """``what`` went wrong, then where the supervisor's stderr is and its last lines."""
    log = folder / SUPERVISOR_LOG
    last = tail(log)
    if not last:
        return f"{what} It wrote nothing to stderr ({log})."
    return f"{what} The end of what it wrote to stderr ({log}):\n{last}"


def adopt(folder: str, run_dir: str | os.PathLike) -> None:
    """In the supervisor, once its run directory exists: stderr goes to ``run_dir/supervisor.log`` (0600, no link
    followed) after what the start log ``folder/supervisor.log`` holds; the working directory becomes the run
    directory; the start folder is removed (``folder`` "": none, stderr only)."""
    sys.stderr.flush()
    fd = os.open(Path(run_dir) / SUPERVISOR_LOG, LOG_FLAGS, 0o600)
    try:
        os.fchmod(fd, 0o600)
        if folder:
            early = _read_own(Path(folder) / SUPERVISOR_LOG)
            while early:
                early = early[os.write(fd, early):]
        os.dup2(fd, 2)
    finally:
        os.close(fd)
    os.chdir(run_dir)
    if folder:
        discard(Path(folder))


def discard(folder: Path) -> None:
    """Remove a start folder, only when it is a private folder of this user's (not a link)."""
    try:
        check_private(folder)
    except OSError:
        return
    shutil.rmtree(folder, ignore_errors=True)


def _read_own(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as file:
        return file.read()
