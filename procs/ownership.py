"""Is a process ours to signal? Checked before nbworkers sends any signal to a pid it did not just fork.

A pid or process group id read from a ``state.json`` (the leftover reaper, the REST API's DELETE), reported by
a worker (its ``hello``) or kept from a process that has since been reaped may belong to another program now
— or a forged file may name one on purpose. A marker alone proves nothing (anyone can copy an environment
variable's value), so a process is ours for a run only when all of these hold:

- it runs as this user (real uid);
- its environment carries the run's marker: ``NBWORKERS_RUN_ID`` equal to the run's random id (the launcher
  sets it for every host and worker; children inherit it; a worker forked from a zygote writes it into its own
  ``/proc`` environment over the zygote's placeholder: ``protocol/private/marker.py``). State files written before
  run ids existed: the environment must name the run directory (``NBWORKERS_RUN_DIR``);
- it was created after the run started;
- and either its (pid, create time) was recorded by the kernel that started it (``RunMarker.recorded``: the
  hosts when they are started, each worker when its host reports the pid, checked to be the host's or this
  kernel's zygote's child), or it is a member of a process group whose leader is such a recorded process of the
  run (a group id cannot be reused while its leader lives).

A zygote carries a placeholder run id that matches no run, and is never recorded in a run: only the kernel that
started it stops it (its own ``subprocess.Popen``, ``backends/zygotes.py``).

Signalling is ``procs/kill.py``'s job (it checks here first). Imports psutil only (no TensorFlow, no IPython).
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from nbworkers.protocol import env_settings
from nbworkers.protocol.private.marker import RUN_ID_PLACEHOLDER

RUN_ID_ENV = env_settings.RUN_ID.name
ZYGOTE_MARKER_ENV = env_settings.ZYGOTE_MARKER.name  # NBWORKERS_SPARE: finds a run root's zygotes (strays.py)
RUN_DIR_ENV = env_settings.RUN_DIR.name
CREATE_TIME_SLACK = 2.0  # seconds of clock slack when comparing a process's start with the run's
EXEC_WAIT = 0.1  # seconds an empty environment (a process in exec) is read again (environ_after_exec)
CREATE_TIME_TOLERANCE = 0.001  # a recorded create time matches a process's own within this (both are clock ticks)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def new_run_id() -> str:
    return secrets.token_hex(12)


@dataclass(frozen=True)
class RunMarker:
    """What the processes of one run carry and what their kernel recorded of them: ``run_id`` (may be "" for old
    state files: then ``run_dir``), the run's start (wall time) and the (pid, create time) pairs recorded."""

    run_id: str
    started: float | None
    run_dir: str = ""
    recorded: frozenset[tuple[int, float]] = frozenset()
    # the run's start in seconds since boot (``boot_clock``), when the marker is made on this machine: compared with
    # a process's ``started_since_boot``, which a step of the wall clock does not move (``started`` is wall time)
    started_boot: float | None = None

    @classmethod
    def from_state(cls, state: dict, run_dir: Path | None) -> "RunMarker":
        value = state.get("run_id")
        run_id = value if isinstance(value, str) else ""
        started = state.get("started") if isinstance(state.get("started"), (int, float)) else None
        directory = str(run_dir.resolve()) if run_dir is not None else ""
        return cls(run_id, started, directory, recorded_pairs(state.get("processes")))


def recorded_pairs(values: Any) -> frozenset[tuple[int, float]]:
    """The well-formed (pid > 1, create time) pairs of a state file's ``processes``."""
    pairs = set()
    for value in values if isinstance(values, list) else []:
        if (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int) and not isinstance(value[0], bool)
                and value[0] > 1 and isinstance(value[1], (int, float)) and not isinstance(value[1], bool)):
            pairs.add((value[0], float(value[1])))
    return frozenset(pairs)


def boot_clock() -> float:
    """Seconds since boot now, on the clock ``started_since_boot`` reads (CLOCK_BOOTTIME: never stepped)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def started_since_boot(pid: int) -> float:
    """The create time a kernel records: seconds from boot to the start of process ``pid`` (``/proc/PID/stat``'s
    starttime, in clock ticks). It never changes while the process lives. psutil's ``create_time()`` adds
    ``/proc/stat``'s btime, which moves by whole seconds when the wall clock is stepped (NTP, a VM's restore: seen
    in CI, where a recorded worker then no longer matched its record and was never stopped). Raises
    ``psutil.NoSuchProcess`` when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except (FileNotFoundError, ProcessLookupError) as error:
        raise psutil.NoSuchProcess(pid) from error
    fields = data[data.rfind(b")") + 2:].split()  # after "pid (comm) ": field 3 (state) onwards
    return int(fields[22 - 3]) / CLOCK_TICKS  # field 22: starttime


def record_of(proc: psutil.Process) -> tuple[int, float] | None:
    """(pid, create time) of a live process, as a kernel records it (``started_since_boot``); None when it is
    gone."""
    try:
        return proc.pid, started_since_boot(proc.pid)
    except (psutil.Error, OSError, IndexError, ValueError):
        return None


def is_recorded(pid: int, created: float, marker: RunMarker) -> bool:
    return any(pid == p and abs(created - t) <= CREATE_TIME_TOLERANCE for p, t in marker.recorded)


def carries_marker(env: dict[str, str], marker: RunMarker) -> bool:
    """Does an environment carry the run's id (or, for old state files, name its run directory)?"""
    if marker.run_id == RUN_ID_PLACEHOLDER:
        return False  # a zygote's placeholder (public), never a run's id: a state file naming it is forged
    if marker.run_id:
        return env.get(RUN_ID_ENV) == marker.run_id
    value = env.get(RUN_DIR_ENV)
    try:
        return bool(value) and bool(marker.run_dir) and str(Path(str(value)).resolve()) == marker.run_dir
    except (OSError, ValueError):
        return False


def environ_after_exec(proc: psutil.Process, wait: float = EXEC_WAIT, pause: float = 0.002) -> dict[str, str]:
    """The process's environment. A process in the middle of exec has none yet: its parent learns that exec began
    (the close-on-exec pipe closes) before the kernel sets up the new program's environment, and /proc/PID/environ
    reads empty until then (about a millisecond; 1 in 15 fresh processes under load here). So an empty one is read
    again for up to ``wait`` seconds: a stop at a worker's launch would have left the worker running."""
    env = proc.environ()
    deadline = time.monotonic() + wait
    while not env and time.monotonic() < deadline:
        time.sleep(pause)
        env = proc.environ()
    return env


def is_ours(proc: psutil.Process, marker: RunMarker, in_group_of_ours: bool = False) -> bool:
    """Same user, carrying the run's marker, and recorded by its kernel — or, with ``in_group_of_ours`` (its
    process group's leader is a recorded process of the run), created after the run started."""
    try:
        if proc.uids().real != os.getuid():
            return False
        env = environ_after_exec(proc)
        created = proc.create_time()  # wall time, to compare with the run's start
        since_boot = started_since_boot(proc.pid)  # the recorded identity
    except (psutil.Error, OSError, IndexError, ValueError):
        return False
    if not carries_marker(env, marker):
        return False
    if marker.started_boot is not None:  # made on this machine: boot-relative, whatever the wall clock did since
        if since_boot < marker.started_boot - CREATE_TIME_SLACK:
            return False  # older than the run: not one of its processes
    elif marker.started is not None and created < marker.started - CREATE_TIME_SLACK:
        return False  # older than the run: not one of its processes, whatever a state file records
    return is_recorded(proc.pid, since_boot, marker) or in_group_of_ours


def ours_in_group(pgid: int, members: list[psutil.Process], marker: RunMarker) -> list[psutil.Process]:
    """The members of process group ``pgid`` that are ours: the group counts as the run's when its leader (pid ==
    pgid) is a recorded process of the run — while the leader lives, the group id cannot be reused."""
    leader = next((p for p in members if p.pid == pgid), None)
    group_is_ours = leader is not None and is_ours(leader, marker)
    return [p for p in members if is_ours(p, marker, group_is_ours)]
