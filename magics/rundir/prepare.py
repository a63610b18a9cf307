"""A new run's directory: made fresh and private, and never taken from another kernel's live run.

The run root is checked first (``layout.checked_run_root``): a root another user could write to, or swap, is
refused before anything is written into it.

``<run_root>/<name>`` (``rundir`` has the layout) holds a run's cell, pushed data, logs and state: mode 0700,
every file 0600 (the cell and the pushed variables are the user's code and data). A new run with a name whose
directory exists replaces it only when that run is over (its state says done, or its kernel is dead and
nothing of it is left running: ``liveness``); a live run of another kernel is refused with what to do. Two
kernels that pick the same name at the same moment: ``mkdir`` decides, the second is refused.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from nbworkers.magics.errors import ClusterNameError
from nbworkers.magics.rundir.layout import cell_path, checked_run_root, push_path, read_state
from nbworkers.magics.rundir.liveness import kernel_alive, leftover_processes
from nbworkers.protocol.private.dirs import write_private
from nbworkers.protocol.statuses import RECORDED_ENDS

__all__ = ["prepare_run_dir", "run_in_use"]


def run_in_use(run_dir: Path) -> str:
    """Why the existing ``run_dir`` must not be replaced ("" when it may be)."""
    state = read_state(run_dir)
    if state is None or state.get("status") in RECORDED_ENDS:
        return ""
    if kernel_alive(state):
        if state.get("kernel_pid") == os.getpid():
            return ""  # this kernel's own earlier run of that name (its supervisor is gone: build_spec checks)
        return (f"cluster {run_dir.name!r} is running in another kernel (pid {state.get('kernel_pid')}): pick another "
                f"--name, or stop it first (`%workers attach {run_dir.name}` then `.stop()`).")
    if leftover_processes(state, run_dir):
        return (f"cluster {run_dir.name!r} was left running by a kernel that died: `%workers attach {run_dir.name}` "
                "then `.stop()` ends it; or pick another --name.")
    return ""


def prepare_run_dir(run_dir: Path, code: str, push: bytes | None, logs: list[Path]) -> None:
    """A fresh private run directory with the cell (``cell.py``), the pushed data (``push.pkl``) and empty logs."""
    checked_run_root(run_dir.parent)  # ours alone, or UnsafeRunRoot naming it and the fix: nothing is written
    try:
        info = os.lstat(run_dir)
    except FileNotFoundError:
        info = None
    if info is not None:
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise ClusterNameError(f"{run_dir} is not a directory nbworkers made (a symlink or a file): remove it "
                                   "or pick another --name.")
        reason = run_in_use(run_dir)
        if reason:
            raise ClusterNameError(reason)
        shutil.rmtree(run_dir)
    try:
        os.mkdir(run_dir, 0o700)
    except FileExistsError:
        raise ClusterNameError(f"another kernel just started a cluster named {run_dir.name!r}: pick another --name "
                               "(or run the cell again for a fresh name).") from None
    os.chmod(run_dir, 0o700)  # whatever the umask
    write_private(cell_path(run_dir), code.encode("utf-8"), exclusive=True)
    if push is not None:
        write_private(push_path(run_dir), push, exclusive=True)
    for path in logs:
        write_private(path, b"", exclusive=True)
