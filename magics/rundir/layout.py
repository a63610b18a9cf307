"""The run directory's layout: every path inside ``<run_root>/<name>/`` is built here, and read or written here.

A run directory (made private by ``rundir_prepare``: mode 0700, every file 0600) holds

- ``cell.py``: the cell (line 1 is the ``%%worker`` line, left blank), ``push.pkl``: the pushed variables;
- ``worker-<i>.log``: worker ``i``'s whole log (its host writes it; the kernel reads its tail on a failure);
- ``state.json``: the run's snapshot plus ``kernel_pid``, ``kernel_id``, ``hostname``, ``host_pids``,
  ``worker_pgids``, ``run_id`` — replaced atomically by the kernel's supervisor about once a second, and by
  whoever records the end of a run whose kernel died (``run_stop``, ``leftovers``);
- ``stop-requested``: a stop asked from outside the kernel (the server extension, an attached handle); the
  supervisor thread obeys it even while the kernel is busy;
- ``restart-requested``: a restart asked from outside the kernel (the server extension: the sidebar's Restart);
  the supervisor thread takes it (deletes it) and restarts the group, even while the kernel is busy;
- ``tensorboard/``: the workers' TensorBoard event files, ``tensorboard.log``: the output of the TensorBoard
  that ``%workers tensorboard`` started (``magics/notebook/tensorboard.py``), ``tensorboard.socket``: the path
  of the Unix socket it serves on;
- ``session-state/gen-<G>/worker-<i>/``: what a session's workers saved before their processes restarted after an
  error (``distlib/saved_state/namespace.py`` writes and reads it; its name is ``protocol/session_wire.STATE_DIR``).

It also finds runs by name under the run root (never a path outside it) and reads their logs.
Imports neither psutil nor TensorFlow (the Ray node imports the file names).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.names import valid_name
from nbworkers.magics.settings import settings
from nbworkers.protocol.private.dirs import owned_root, write_private
from nbworkers.protocol.terminal import settled_lines

STATE_FILE = "state.json"
STOP_REQUEST_FILE = "stop-requested"
RESTART_REQUEST_FILE = "restart-requested"
CELL_FILE = "cell.py"
PUSH_FILE = "push.pkl"
TENSORBOARD_DIR = "tensorboard"  # the workers write it too: distlib/tensorboard.py (SUBDIR)
TENSORBOARD_LOG_FILE = "tensorboard.log"
SESSION_CLIENT_FILE = "session-client.json"  # a detached session's socket and key (sessions/detach/wire.py), 0600
TENSORBOARD_SOCKET_FILE = "tensorboard.socket"  # the path of the Unix socket the run's TensorBoard serves on
TAIL_READ_BYTES = 64 * 1024  # the end of a log read for its last lines (a failed worker's error)
LOG_MAX_BYTES = 8 * 1024 * 1024  # most bytes of a log returned at once (the end of the log)
WORKER_ID = re.compile(r"[0-9]{1,6}")  # ASCII digits only (str.isdigit() also takes "²")


class RunNotFound(LookupError):
    """No run of that name (or its name is not a valid run name). The message says what to do."""


class UnsafeRunRoot(LaunchError):
    """The run root is a symlink, another user's, writable by group or others, or inside a folder through which
    another user could replace it: nothing is run from it or read from it. The message names it and the fix."""


# ------------------------------------------------------------------------------------------- paths
def run_root(root: str | os.PathLike | None = None) -> Path:
    """The run root (default: ``settings().run_root``), ``~`` expanded."""
    if root is None:
        root = settings().run_root
    return Path(root).expanduser()


def checked_run_root(root: str | os.PathLike | None = None) -> Path:
    """The run root, made private (0700) if absent, else checked (``private_dirs.owned_root``): one check for
    ``%load_ext``, every launch, every listing and the server extension. Raises UnsafeRunRoot."""
    path = run_root(root)
    try:
        return owned_root(path)
    except OSError as error:
        raise UnsafeRunRoot(
            f"nbworkers will not use the run root {path}: {error} To fix it: `chmod 700 {path}` if the folder and "
            f"everything in it are yours, or set NBWORKERS_RUN_ROOT (or settings().run_root) to a private folder, "
            "for example ~/.nbworkers/runs."
        ) from None


def path_for(name: str, root: str | os.PathLike | None = None) -> Path:
    """Where the run ``name`` lives (for a new run: the name was checked by the launch)."""
    return run_root(root) / name


def log_path(run_dir: Path, index: int) -> Path:
    return Path(run_dir) / f"worker-{index}.log"


def cell_path(run_dir: Path) -> Path:
    return Path(run_dir) / CELL_FILE


def push_path(run_dir: Path) -> Path:
    return Path(run_dir) / PUSH_FILE


def state_path(run_dir: Path) -> Path:
    return Path(run_dir) / STATE_FILE


def tensorboard_dir(run_dir: Path) -> Path:
    return Path(run_dir) / TENSORBOARD_DIR


def tensorboard_socket_file(run_dir: Path) -> Path:
    """Names the Unix socket of the run's TensorBoard (the server extension's proxy reads it)."""
    return Path(run_dir) / TENSORBOARD_SOCKET_FILE


def tensorboard_log_path(run_dir: Path) -> Path:
    """The output of the TensorBoard a kernel started on the run (``%workers tensorboard``)."""
    return Path(run_dir) / TENSORBOARD_LOG_FILE


# ------------------------------------------------------------------------------------------- finding runs
def run_dir_of(name: str, root: str | os.PathLike | None = None) -> Path:
    """The run directory of an existing run ``name``, refusing anything that could point outside the run root.

    The name must be a valid cluster name (no '/', no '..', no leading '.'), and the directory, with every
    symlink resolved, must lie inside the resolved run root and hold a state file.
    """
    return _run_dir_in(name, checked_run_root(root).resolve())


def _run_dir_in(name: str, base: Path) -> Path:
    """``run_dir_of`` under the already checked, resolved run root ``base``."""
    if not isinstance(name, str) or not valid_name(name):
        raise RunNotFound(f"{name!r} is not a cluster name (letters, digits, '.', '_', '-'; at most 64).")
    directory = (base / name).resolve()
    if not directory.is_relative_to(base) or directory == base or directory.parent != base:
        raise RunNotFound(f"{name!r} does not name a run directory inside {base}.")
    if not state_path(directory).is_file():
        raise RunNotFound(f"no cluster named {name!r} under {base}. "
                          "`%workers` or GET /nbworkers/api/clusters lists them.")
    return directory


def list_run_dirs(root: str | os.PathLike | None = None) -> list[Path]:
    """Every run directory under the run root (valid name, a state file, not a symlink out of the root).
    Raises UnsafeRunRoot when the run root is not this user's alone."""
    base = checked_run_root(root).resolve()
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            found.append(_run_dir_in(entry.name, base))
        except RunNotFound:
            continue
    return found


# ------------------------------------------------------------------------------------------- state, stop request
def read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(state_path(run_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def state_mtime(run_dir: Path) -> float | None:
    try:
        return state_path(run_dir).stat().st_mtime
    except OSError:
        return None


def write_state(run_dir: Path, state: Mapping[str, Any]) -> None:
    """Replace the state file atomically (0600). Raises OSError."""
    tmp = Path(run_dir) / f"{STATE_FILE}.{os.getpid()}.tmp"
    write_private(tmp, json.dumps(state).encode("utf-8"))
    os.replace(tmp, state_path(run_dir))


def request_stop(run_dir: Path) -> None:
    """Ask the run's supervisor thread to stop it (it checks this file even while the kernel is busy)."""
    write_private(Path(run_dir) / STOP_REQUEST_FILE, f"{time.time()}\n".encode())


def stop_requested(run_dir: Path) -> bool:
    return (Path(run_dir) / STOP_REQUEST_FILE).exists()


def request_restart(run_dir: Path) -> None:
    """Ask the run's supervisor thread to restart its group (it takes the file even while the kernel is busy)."""
    write_private(Path(run_dir) / RESTART_REQUEST_FILE, f"{time.time()}\n".encode())


def remove_session_client(run_dir: Path) -> None:
    """A detached session's client file goes (its session ended, or its supervisor died: leftovers.reap)."""
    try:
        os.unlink(Path(run_dir) / SESSION_CLIENT_FILE)
    except FileNotFoundError:
        pass


def restart_requested(run_dir: Path) -> bool:
    return (Path(run_dir) / RESTART_REQUEST_FILE).exists()


def take_restart_request(run_dir: Path) -> bool:
    """True once per restart request: the file is removed as it is taken."""
    try:
        (Path(run_dir) / RESTART_REQUEST_FILE).unlink()
    except FileNotFoundError:
        return False
    except OSError:
        return False
    return True


# ------------------------------------------------------------------------------------------- logs
def read_tail(path: Path, lines: int, max_bytes: int = TAIL_READ_BYTES) -> str:
    """The last ``lines`` lines of a log (read from its last ``max_bytes`` bytes; as a terminal shows them:
    ``protocol/terminal.py``); "" when unreadable."""
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(0, size - max_bytes))
            text = file.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(settled_lines(text)[-lines:])


def read_log(run_dir: Path, worker: str | int, tail: int | None = None, max_bytes: int = LOG_MAX_BYTES) -> str:
    """A worker's log text (the last ``tail`` lines; at most the last ``max_bytes`` bytes). The worker index is
    checked against the run's state and the log must lie inside the run directory (RunNotFound otherwise)."""
    text = str(worker)
    if not WORKER_ID.fullmatch(text):
        raise RunNotFound(f"worker {worker!r}: give the worker's index, 0, 1, ...")
    index = int(text)
    state = read_state(run_dir) or {}
    count = len(state.get("workers") or [])
    if not 0 <= index < count:
        raise RunNotFound(f"cluster {run_dir.name!r} has workers 0..{count - 1}, not {index}.")
    path = log_path(run_dir, index).resolve()
    if not path.is_relative_to(run_dir.resolve()):
        raise RunNotFound(f"worker {index}'s log is not inside the run directory.")
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(0, size - max_bytes))
            data = file.read()
    except OSError:
        return ""
    lines = settled_lines(data.decode("utf-8", errors="replace"))  # as a terminal shows it (protocol/terminal.py)
    if size > max_bytes and lines:
        lines = lines[1:]  # the first line was cut
    if tail is not None:
        lines = lines[-tail:] if tail > 0 else []
    return "\n".join(lines)
