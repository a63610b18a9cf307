"""Is a process ours to signal? Checked before nbworkers sends any signal to a pid it did not just fork.

A pid or process group id read from a ``state.json`` (the leftover reaper, the REST API's DELETE), reported by
a worker (its ``hello``) or kept from a process that has since been reaped may belong to another program now
— or a forged file may name one on purpose. A process is ours for a run only when all of these hold:

- it runs as this user (real uid);
- it was created after the run started (psutil ``create_time``; a zygote is older, see below);
- its environment carries the run's marker: ``NBWORKERS_RUN_ID`` equal to the run's random id (the launcher
  sets it for every host and worker; children inherit it). A zygote (``backends/zygotes.py``) was started
  before the run, and a worker it forks learns the run's environment after the fork (its ``/proc`` environment
  is the zygote's): both carry ``NBWORKERS_SPARE`` = the run root of the kernel that started the zygote instead
  (a historical name). State files written before run ids existed: the
  environment must name the run directory (``NBWORKERS_RUN_DIR``).

Signalling is ``process_kill``'s job (it checks here first). Imports psutil only (no TensorFlow, no IPython).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import psutil

from nbworkers.protocol import env_settings

RUN_ID_ENV = env_settings.RUN_ID.name
ZYGOTE_MARKER_ENV = env_settings.ZYGOTE_MARKER.name  # NBWORKERS_SPARE
RUN_DIR_ENV = env_settings.RUN_DIR.name
CREATE_TIME_SLACK = 2.0  # seconds of clock slack when comparing a process's start with the run's


def new_run_id() -> str:
    return secrets.token_hex(12)


@dataclass(frozen=True)
class RunMarker:
    """What a process of one run carries: ``run_id`` (may be "" for old state files: then ``run_dir``),
    the run's start (wall time), and the run root whose zygotes (and the workers they fork) count as its own."""

    run_id: str
    started: float | None
    run_dir: str = ""
    zygote_root: str = ""

    @classmethod
    def from_state(cls, state: dict, run_dir: Path | None) -> "RunMarker":
        value = state.get("run_id")
        run_id = value if isinstance(value, str) else ""
        started = state.get("started") if isinstance(state.get("started"), (int, float)) else None
        directory = str(run_dir.resolve()) if run_dir is not None else ""
        return cls(run_id, started, directory, str(Path(directory).parent) if directory else "")


def _zygote_of(env: dict[str, str], marker: RunMarker) -> bool:
    root = env.get(ZYGOTE_MARKER_ENV, "")
    if not root or not marker.zygote_root:
        return False
    try:
        return Path(root).resolve() == Path(marker.zygote_root).resolve()
    except (OSError, ValueError):
        return False


def is_ours(proc: psutil.Process, marker: RunMarker) -> bool:
    """Same user, created after the run started, carrying the run's marker (see the module docstring)."""
    try:
        if proc.uids().real != os.getuid():
            return False
        env = proc.environ()
        created = proc.create_time()
    except (psutil.Error, OSError):
        return False
    zygote = _zygote_of(env, marker)
    if marker.started is not None and created < marker.started - CREATE_TIME_SLACK and not zygote:
        return False
    if zygote:
        return True
    if marker.run_id:
        return env.get(RUN_ID_ENV) == marker.run_id
    value = env.get(RUN_DIR_ENV)
    try:
        return bool(value and marker.run_dir) and str(Path(value).resolve()) == marker.run_dir
    except (OSError, ValueError):
        return False
