"""Is a run really alive, and which of its processes are still there? Read from its state file alone.

- A state that says ``running`` whose kernel is dead is a *lost* run (``LOST``); a kernel pid reused by a later
  process does not count as the kernel.
- A run's leftovers are the members of its host and worker process groups, and the processes whose environment
  names its run directory, that were created while it lived and are its own (``ownership``: a pid or process
  group id reused later by another program, or named by a forged state file, is never returned).
- A run whose state names another machine (a run root shared over the network) is never judged from here.

Imports psutil (no TensorFlow, no IPython).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import psutil

from nbworkers.magics.run.core.state import DONE_STATES
from nbworkers.magics.run.core.statuses import ClusterStatus
from nbworkers.magics.rundir.layout import state_mtime
from nbworkers.procs.kill import alive
from nbworkers.procs.ownership import CREATE_TIME_SLACK, ZYGOTE_MARKER_ENV, RunMarker, is_ours
from nbworkers.protocol import wire

LOST = ClusterStatus.LOST.value  # the status of a run whose state says it is running but whose kernel is dead


def _int_list(values: Any) -> list[int]:
    if not isinstance(values, list):
        return []
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 1]


def is_foreign(state: dict[str, Any]) -> bool:
    """True when the run lives on another machine (a run root shared over the network): hands off."""
    here = socket.gethostname()
    host = state.get("hostname")
    if isinstance(host, str) and host:
        return host != here
    hosts = {w.get("host") for w in state.get("workers") or [] if isinstance(w, dict) and w.get("host")}
    return bool(hosts) and here not in hosts


def kernel_alive(state: dict[str, Any]) -> bool:
    """Is the kernel that started the run still running? (A pid reused by a later process does not count.)"""
    pid = state.get("kernel_pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if is_foreign(state):
        return True  # cannot tell from here; never call another machine's run dead
    try:
        proc = psutil.Process(pid)
        created = proc.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True
    started = state.get("started")
    if isinstance(started, (int, float)) and created > started + CREATE_TIME_SLACK:
        return False  # a newer process got that pid
    return alive(proc)


def _names_run_dir(proc: psutil.Process, run_dir: Path) -> bool:
    """Does the process's environment say it belongs to that (resolved) run directory?"""
    try:
        value = proc.environ().get(wire.ENV_RUN_DIR)
        return bool(value) and Path(value).resolve() == run_dir
    except (psutil.Error, OSError, ValueError):
        return False


def _has_zygote_marker(proc: psutil.Process) -> bool:
    """A zygote or a worker it forked (carries the zygote marker; see ownership.py, backends/zygotes.py)."""
    try:
        return bool(proc.environ().get(ZYGOTE_MARKER_ENV))
    except (psutil.Error, OSError):
        return False


def leftover_processes(state: dict[str, Any], run_dir: Path | None = None) -> list[psutil.Process]:
    """Live processes of the run, created while it lived: the members of its host and worker process groups,
    and any process whose environment names its run directory (a worker whose group id was never reported,
    a child a worker started in a group of its own). Only processes that are the run's own (``ownership``:
    same user, started after the run, carrying its NBWORKERS_RUN_ID) — whatever pids a stale or forged
    state file lists, nothing else is ever returned (and so never signalled)."""
    if is_foreign(state):
        return []
    groups = set(_int_list(state.get("host_pids"))) | set(_int_list(state.get("worker_pgids")))
    own_dir = run_dir.resolve() if run_dir is not None else None
    if not groups and own_dir is None:
        return []
    started = state.get("started") if isinstance(state.get("started"), (int, float)) else None
    last_seen = state_mtime(run_dir) if run_dir is not None else None
    if kernel_alive(state):
        last_seen = None  # the kernel may have started processes since its last write
    me = os.getpid()
    marker = RunMarker.from_state(state, run_dir)
    found = []
    for proc in psutil.process_iter(["pid", "create_time"]):
        if proc.pid == me:
            continue
        try:
            member = os.getpgid(proc.pid) in groups
        except OSError:
            continue
        if not member and (own_dir is None or not _names_run_dir(proc, own_dir)):
            continue
        created = proc.info.get("create_time") or 0.0
        if started is not None and created < started - CREATE_TIME_SLACK and not (member and _has_zygote_marker(proc)):
            continue  # older than the run: another process that reuses the id (a zygote is older, and ours)
        if last_seen is not None and created > last_seen + CREATE_TIME_SLACK:
            continue
        if not is_ours(proc, marker):
            continue
        if alive(proc):
            found.append(proc)
    return found


def effective_status(state: dict[str, Any], kernel_is_alive: bool | None = None) -> str:
    """The recorded status, or ``LOST`` when it says the run is not over but its kernel is dead."""
    recorded = state.get("status")
    status = recorded if isinstance(recorded, str) else "unknown"
    if status in DONE_STATES:
        return status
    is_alive = kernel_alive(state) if kernel_is_alive is None else kernel_is_alive
    return status if is_alive else LOST
