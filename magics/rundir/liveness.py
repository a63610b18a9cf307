"""Is a run really alive, and which of its processes are still there? Read from its state file alone.

- A state that says ``running`` whose kernel is dead is a *lost* run (``LOST``); a kernel pid reused by a later
  process does not count as the kernel.
- A run's leftovers are the processes its kernel recorded (pid and create time, in the state file) and the
  members of their process groups, that are its own (``ownership``: a pid or process group id reused later by
  another program, or named by a forged state file, is never returned).
- A run whose state names another machine (a run root shared over the network) is never judged from here.

Imports psutil (no TensorFlow, no IPython).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import psutil

from nbworkers.procs.kill import alive, group_members
from nbworkers.procs.ownership import (
    CREATE_TIME_SLACK,
    CREATE_TIME_TOLERANCE,
    RunMarker,
    is_ours,
    ours_in_group,
    started_since_boot,
)
from nbworkers.protocol.statuses import RECORDED_ENDS, ClusterStatus

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
        since_boot = started_since_boot(pid)
    except psutil.NoSuchProcess:
        return False
    except (psutil.Error, OSError, IndexError, ValueError):
        return True
    recorded = state.get("kernel_started")
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool):
        if abs(since_boot - recorded) > CREATE_TIME_TOLERANCE:
            return False  # a newer process got that pid
        return alive(proc)
    started = state.get("started")  # state files without kernel_started: wall times, a clock step may mislead
    if isinstance(started, (int, float)) and created > started + CREATE_TIME_SLACK:
        return False  # a newer process got that pid
    return alive(proc)


def leftover_processes(state: dict[str, Any], run_dir: Path | None = None) -> list[psutil.Process]:
    """Live processes of the run: the ones whose (pid, create time) its kernel recorded in the state file
    (``processes``), and the members of their process groups created after the run started — each of them this
    user's and carrying the run's NBWORKERS_RUN_ID (``ownership.is_ours``). Whatever pids a stale or forged
    state file lists, nothing else is ever returned (and so never signalled); a state file that records no
    (pid, create time) pair names nothing."""
    if is_foreign(state):
        return []
    marker = RunMarker.from_state(state, run_dir)
    if not marker.recorded:
        return []
    groups = set(_int_list(state.get("host_pids"))) | set(_int_list(state.get("worker_pgids")))
    groups |= {pid for pid, _ in marker.recorded}
    me = os.getpid()
    found: dict[int, psutil.Process] = {}
    for pgid, procs in group_members(groups).items():
        for proc in ours_in_group(pgid, procs, marker):
            if proc.pid != me and alive(proc):
                found[proc.pid] = proc
    for pid, _ in marker.recorded:  # a recorded process that left its group
        if pid in found or pid == me:
            continue
        try:
            proc = psutil.Process(pid)
        except psutil.Error:
            continue
        if is_ours(proc, marker) and alive(proc):
            found[pid] = proc
    return list(found.values())


def effective_status(state: dict[str, Any], kernel_is_alive: bool | None = None) -> str:
    """The recorded status, or ``LOST`` when it says the run is not over but its kernel is dead."""
    recorded = state.get("status")
    status = recorded if isinstance(recorded, str) else "unknown"
    if status in RECORDED_ENDS:
        return status
    is_alive = kernel_alive(state) if kernel_is_alive is None else kernel_is_alive
    return status if is_alive else LOST
