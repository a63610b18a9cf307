"""Ending processes: the one place nbworkers signals a process group or a list of processes.

Modelled on Horovod's ``safe_shell_exec`` (terminate, wait a grace period, kill what is left, wait): every stop
is TERM, up to ``grace`` seconds for the processes to go, KILL, then up to ``wait`` seconds for them to go.
``grace`` 0 is an immediate KILL (the clean-up after a stop the hosts already carried out).

- ``kill_groups(pgids, marker, grace)``: process groups named by a state file, a worker's ``hello`` or a handle
  kept from a launch — only members that are ours (``ownership.is_ours``: same user, carrying the run's
  ``NBWORKERS_RUN_ID``, and recorded by the kernel, or in a group whose leader is); a whole group at once
  (``killpg``) when every member is ours, one by one otherwise; a pid ≤ 1 or a group with nothing of ours is
  never signalled.
- ``stop_processes(procs, grace)``: processes already checked to be ours (``liveness.leftover_processes``).
- ``kill_group(pgid, grace)``: a group this process just started itself (the host's worker, a test's child):
  no ownership check.
- ``interrupt_group(pgid, grace, interrupt_grace)``: the same group, asked first: SIGINT (a Python worker gets
  ``KeyboardInterrupt`` in its main thread, so its ``finally:`` blocks and ``atexit`` run), up to
  ``interrupt_grace`` s, then ``kill_group``'s TERM and KILL at ``grace`` s from the start (the steps:
  ``stop_steps``).
- ``kill_process_groups(procs)``: SIGKILL the group of each process found by ``strays.processes_under`` (tests,
  the demo, benchmarks: what a run root left behind).

Waiting never reaps a child (``subprocess.Popen`` keeps its exit code): a zombie counts as gone.
Imports psutil (no TensorFlow, no IPython).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable

import psutil

from nbworkers.procs.ownership import RunMarker, ours_in_group

KILL_GRACE = 3.0  # seconds between SIGTERM and SIGKILL when processes are stopped directly
INTERRUPT_GRACE = 1.0  # interrupt_group: seconds between SIGINT and SIGTERM (NBWORKERS_STOP_INTERRUPT_GRACE)
POLL_INTERVAL = 0.05  # seconds between checks while waiting for processes to go


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a process psutil cannot inspect counts as alive)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def wait_gone(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` seconds for ``procs`` to end (without reaping them); the ones still alive."""
    left = [p for p in procs if alive(p)]
    deadline = time.monotonic() + max(0.0, timeout)
    while left and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL)
        left = [p for p in left if alive(p)]
    return left


def _send(procs: Iterable[psutil.Process], sig: int) -> list[psutil.Process]:
    sent = []
    for proc in procs:
        try:
            proc.send_signal(sig)  # psutil refuses a pid reused since the Process was made
            sent.append(proc)
        except psutil.Error:
            continue
    return sent


def stop_processes(procs: list[psutil.Process], grace: float = KILL_GRACE, wait: float | None = None) -> int:
    """TERM ``procs`` (already checked to be ours), wait up to ``grace`` s, KILL the rest, wait up to ``wait`` s
    (default: ``grace``). ``grace`` 0: KILL at once. Returns how many were signalled."""
    wait = grace if wait is None else wait
    if grace <= 0:
        signalled = _send(procs, signal.SIGKILL)
        wait_gone(signalled, wait)
        return len(signalled)
    signalled = _send(procs, signal.SIGTERM)
    left = wait_gone(signalled, grace)
    wait_gone(_send(left, signal.SIGKILL), wait)
    return len(signalled)


def group_members(pgids: Iterable[int]) -> dict[int, list[psutil.Process]]:
    """The live (not zombie) members of each process group, from one scan of the process table. Only groups > 1."""
    wanted = {g for g in pgids if isinstance(g, int) and not isinstance(g, bool) and g > 1}
    members: dict[int, list[psutil.Process]] = {g: [] for g in wanted}
    if not wanted:
        return members
    for proc in psutil.process_iter(["pid"]):
        try:
            pgid = os.getpgid(proc.pid)
            if pgid in wanted and proc.status() != psutil.STATUS_ZOMBIE:
                members[pgid].append(proc)
        except (OSError, psutil.Error):
            continue
    return members


def signal_groups_if_ours(pgids: Iterable[int], marker: RunMarker, sig: int = signal.SIGKILL) -> list[psutil.Process]:
    """Send ``sig`` to the members of the groups ``pgids`` that are ours (module docstring); the ones signalled."""
    signalled: list[psutil.Process] = []
    for pgid, procs in group_members(pgids).items():
        ours = ours_in_group(pgid, procs, marker)
        if ours and len(ours) == len(procs):
            try:
                os.killpg(pgid, sig)
                signalled.extend(ours)
                continue
            except (ProcessLookupError, PermissionError):
                continue
        signalled.extend(_send(ours, sig))
    return signalled


def kill_groups(pgids: Iterable[int], marker: RunMarker, grace: float = 0.0, wait: float = 0.0) -> int:
    """End the members of the process groups ``pgids`` that are ours: TERM, up to ``grace`` s, KILL (the groups are
    scanned and checked again: a child started meanwhile goes too), up to ``wait`` s for them to go. ``grace`` 0:
    SIGKILL now. Returns how many processes were signalled first."""
    pgids = list(pgids)
    if grace > 0:
        signalled = signal_groups_if_ours(pgids, marker, signal.SIGTERM)
        if not wait_gone(signalled, grace):
            return len(signalled)
        killed = signal_groups_if_ours(pgids, marker, signal.SIGKILL)
    else:
        signalled = killed = signal_groups_if_ours(pgids, marker, signal.SIGKILL)
    wait_gone(killed, wait)
    return len(signalled)


def group_alive(pgid: int) -> bool:
    """Does the process group have a member that is not a zombie?"""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(…, 0) also succeeds for zombies; a group of only zombies is gone for our purposes.
    return bool(group_members([pgid]).get(pgid))


def kill_group(pgid: int, grace: float = 0.0) -> None:
    """A group this process started itself (no ownership check): SIGTERM, up to ``grace`` s, then SIGKILL unless
    it is gone. ``grace`` 0: SIGKILL at once."""
    if grace > 0:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        time.sleep(POLL_INTERVAL)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_steps(grace: float, interrupt_grace: float) -> list[tuple[float, signal.Signals]]:
    """When ``interrupt_group`` sends which signal, in seconds from its start: SIGINT at once, SIGTERM after
    ``interrupt_grace`` (no later than ``grace``), SIGKILL at ``grace``; ``grace`` 0: SIGKILL at once."""
    if grace <= 0:
        return [(0.0, signal.SIGKILL)]
    return [(0.0, signal.SIGINT), (min(max(interrupt_grace, 0.0), grace), signal.SIGTERM), (grace, signal.SIGKILL)]


def interrupt_group(pgid: int, grace: float, interrupt_grace: float = INTERRUPT_GRACE,
                    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                    send: Callable[[int, int], None] = os.killpg,
                    alive: Callable[[int], bool] | None = None) -> list[signal.Signals]:
    """A group this process started itself (no ownership check), stopped as ``stop_steps`` says, each step only
    while a member is left. Returns the signals sent. (``clock``, ``sleep``, ``send``, ``alive``: tests' fakes.)"""
    is_alive = group_alive if alive is None else alive
    start = clock()
    sent: list[signal.Signals] = []
    for at, sig in stop_steps(grace, interrupt_grace):
        while clock() - start < at:
            if not is_alive(pgid):
                return sent
            sleep(min(POLL_INTERVAL, max(at - (clock() - start), 0.0)))
        if sent and not is_alive(pgid):
            return sent
        try:
            send(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return sent
        sent.append(sig)
    return sent


def kill_process_groups(procs: list[psutil.Process]) -> list[int]:
    """SIGKILL the whole process group of each, now (no grace: clean-up after a check). Returns their pids."""
    for proc in procs:
        try:
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return [proc.pid for proc in procs]
