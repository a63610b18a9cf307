"""A kernel's record of a process it started (procs/ownership.py ``record_of``, ``is_ours``) holds when the wall
clock is stepped. The record is the start since boot (/proc/PID/stat), not psutil's ``create_time()``: that adds
/proc/stat's btime, which moves by whole seconds on a clock step (NTP, a VM restored from a snapshot). In CI a
step between a worker's record and its stop left the worker unmatched, never signalled. Reads this test's own
process; signals nothing."""

from __future__ import annotations

import os

import psutil
import pytest
from psutil import _pslinux

from nbworkers.procs.ownership import RUN_ID_ENV, RunMarker, is_ours, record_of, started_since_boot


def test_the_start_since_boot_is_psutils_create_time_without_the_boot_time():
    me = psutil.Process()
    assert started_since_boot(me.pid) == pytest.approx(me.create_time() - psutil.boot_time(), abs=0.011)


def test_a_gone_process_is_no_such_process():
    with pytest.raises(psutil.NoSuchProcess):
        started_since_boot(2**22 + 7)  # above the kernel's pid_max: never a live process


def test_a_record_still_matches_after_the_wall_clock_is_stepped(monkeypatch):
    me = psutil.Process()
    record = record_of(me)
    assert record is not None
    marker = RunMarker("run-x", None, recorded=frozenset({record}))
    monkeypatch.setattr(psutil.Process, "environ", lambda self: {RUN_ID_ENV: "run-x"})
    assert is_ours(me, marker)
    btime = _pslinux.boot_time()
    monkeypatch.setattr(_pslinux, "boot_time", lambda: btime + 1.0)  # the clock stepped by a second
    stepped = psutil.Process(me.pid)
    assert stepped.create_time() != me.create_time()  # what psutil's wall create time does on a step
    assert record_of(stepped) == record
    assert is_ours(stepped, marker)


def test_another_start_at_the_same_pid_is_not_the_recorded_process(monkeypatch):
    me = psutil.Process()
    monkeypatch.setattr(psutil.Process, "environ", lambda self: {RUN_ID_ENV: "run-x"})
    earlier = RunMarker("run-x", None, recorded=frozenset({(me.pid, started_since_boot(me.pid) - 0.01)}))
    assert not is_ours(me, earlier)  # one clock tick apart: the pid was reused since the record


def test_a_live_kernel_stays_alive_for_the_reaper_after_a_clock_step(monkeypatch):
    """state.json's ``kernel_started`` (magics/run/outputs.py): a forward step of the clock by more than the
    slack made a live kernel look like a newer process at its pid, so its run would have been reaped."""
    from nbworkers.magics.rundir.liveness import kernel_alive

    me = os.getpid()
    state = {"kernel_pid": me, "kernel_started": started_since_boot(me), "started": psutil.Process().create_time()}
    assert kernel_alive(state)
    btime = _pslinux.boot_time()
    monkeypatch.setattr(_pslinux, "boot_time", lambda: btime + 60.0)
    assert kernel_alive(state)
    assert not kernel_alive({**state, "kernel_started": state["kernel_started"] + 0.5})  # another process's pid


def test_an_environment_read_empty_during_exec_is_read_again():
    """Popen returns once exec began; /proc/PID/environ reads empty until the new program's environment is set up
    (test_security_processes.py saw it): is_ours reads again instead of calling the process a stranger."""
    from nbworkers.procs.ownership import environ_after_exec

    class InExec:
        def __init__(self, empty_reads: int):
            self.reads, self.empty_reads = 0, empty_reads

        def environ(self):
            self.reads += 1
            return {} if self.reads <= self.empty_reads else {RUN_ID_ENV: "run-x"}

    in_exec = InExec(empty_reads=3)
    assert environ_after_exec(in_exec, wait=1.0, pause=0.001) == {RUN_ID_ENV: "run-x"} and in_exec.reads == 4
    never = InExec(empty_reads=10**6)  # a kernel thread, say: empty for good, given up after the wait
    assert environ_after_exec(never, wait=0.02, pause=0.001) == {} and never.reads > 1
