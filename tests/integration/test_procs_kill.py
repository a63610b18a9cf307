"""The one helper that ends processes (procs/kill.py): TERM, grace, KILL, wait — only what is ours.
Real (tiny) processes, no TensorFlow."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from nbworkers.procs import kill as process_kill
from nbworkers.procs.ownership import RunMarker, record_of, started_since_boot

RUN_ID = "process-kill-tests"
GONE_TIMEOUT = 20


def group(children: int = 0, ignore_term: bool = False, run_id: str | None = RUN_ID,
          child_run_id: str | None = None) -> subprocess.Popen:
    """A process in a session (and process group) of its own, with ``children`` sleeping children in its group
    (``child_run_id``: their NBWORKERS_RUN_ID, default the parent's); it prints 'ready' once they are started."""
    code = (
        "import os, signal, subprocess, sys, time\n"
        f"if {ignore_term}: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"env = dict(os.environ, NBWORKERS_RUN_ID={child_run_id!r}) if {child_run_id is not None} else None\n"
        f"kids = [subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        f"signal.signal(signal.SIGTERM, signal.SIG_IGN) if {ignore_term} else None; time.sleep(600)'], env=env)"
        f" for _ in range({children})]\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    env = dict(os.environ)
    env.pop("NBWORKERS_RUN_ID", None)
    if run_id is not None:
        env["NBWORKERS_RUN_ID"] = run_id
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True, env=env)
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def members(pgid: int) -> list[psutil.Process]:
    return process_kill.group_members([pgid])[pgid]


@pytest.fixture
def groups():
    started: list[subprocess.Popen] = []

    def make(*args, **kwargs) -> subprocess.Popen:
        started.append(group(*args, **kwargs))
        return started[-1]

    yield make
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def marker(*recorded: subprocess.Popen) -> RunMarker:
    """The run's marker with the (pid, create time) of ``recorded`` as their kernel records them."""
    pairs = frozenset(record_of(psutil.Process(p.pid)) for p in recorded)
    return RunMarker(RUN_ID, time.time() - 60, recorded=pairs)  # type: ignore[arg-type]


def test_a_whole_group_of_ours_is_stopped_with_term_first(groups):
    proc = groups(children=2)
    assert len(members(proc.pid)) == 3
    assert process_kill.kill_groups([proc.pid], marker(proc), grace=GONE_TIMEOUT, wait=GONE_TIMEOUT) == 3
    assert proc.wait(GONE_TIMEOUT) == -signal.SIGTERM  # the helper never reaps: Popen keeps the exit code
    assert not process_kill.group_alive(proc.pid)


def test_what_ignores_term_is_killed_after_the_grace(groups):
    proc = groups(children=1, ignore_term=True)
    process_kill.kill_groups([proc.pid], marker(proc), grace=0.5, wait=GONE_TIMEOUT)
    assert proc.wait(GONE_TIMEOUT) == -signal.SIGKILL
    assert not members(proc.pid)


def test_grace_zero_is_an_immediate_sigkill(groups):
    proc = groups()
    assert process_kill.kill_groups([proc.pid], marker(proc)) == 1
    assert proc.wait(GONE_TIMEOUT) == -signal.SIGKILL


def test_groups_that_are_not_ours_are_never_signalled(groups):
    other_run = groups(run_id="another-run")
    unmarked = groups(run_id=None)
    ours = groups(children=1)
    recorded_all = marker(other_run, unmarked)  # recorded, but without the run's id
    assert process_kill.kill_groups([other_run.pid, unmarked.pid, 0, 1, -1, True], recorded_all, grace=0.2) == 0
    assert process_kill.kill_groups([ours.pid], marker()) == 0  # the run's id alone (a marker) proves nothing
    created = started_since_boot(ours.pid)
    another_start = RunMarker(RUN_ID, None, recorded=frozenset({(ours.pid, created - 5.0)}))  # the pid reused since
    assert process_kill.kill_groups([ours.pid], another_start) == 0
    time.sleep(0.2)
    assert other_run.poll() is None and unmarked.poll() is None and ours.poll() is None
    assert len(members(ours.pid)) == 2


def test_a_mixed_group_loses_only_its_members_that_are_ours(groups):
    proc = groups(children=1, child_run_id="")  # the leader is ours, its child (same group) is not
    child = psutil.Process(proc.pid).children()[0]
    assert process_kill.kill_groups([proc.pid], marker(proc)) == 1  # one by one, not killpg
    assert proc.wait(GONE_TIMEOUT) == -signal.SIGKILL
    time.sleep(0.2)
    assert process_kill.alive(child)
    child.kill()


def test_stop_processes_terms_waits_and_kills(groups):
    polite, stubborn = groups(), groups(ignore_term=True)
    procs = [psutil.Process(polite.pid), psutil.Process(stubborn.pid)]
    assert process_kill.stop_processes(procs, grace=0.5, wait=GONE_TIMEOUT) == 2
    assert polite.wait(GONE_TIMEOUT) == -signal.SIGTERM
    assert stubborn.wait(GONE_TIMEOUT) == -signal.SIGKILL
    assert process_kill.stop_processes(procs, grace=0.1) == 0  # gone: nothing to signal


def test_kill_group_and_group_alive_for_a_group_we_started(groups):
    proc = groups(children=1, ignore_term=True)
    assert process_kill.group_alive(proc.pid)
    process_kill.kill_group(proc.pid, 0.3)
    assert proc.wait(GONE_TIMEOUT) == -signal.SIGKILL
    assert process_kill.wait_gone(members(proc.pid), GONE_TIMEOUT) == []
    assert not process_kill.group_alive(proc.pid)
    process_kill.kill_group(proc.pid, 0.3)  # gone: no error


def test_kill_process_groups_kills_the_group_of_each(groups):
    proc = groups(children=1)
    child = psutil.Process(proc.pid).children()[0]
    assert process_kill.kill_process_groups([child]) == [child.pid]
    assert proc.wait(GONE_TIMEOUT) == -signal.SIGKILL
    assert process_kill.wait_gone([child], GONE_TIMEOUT) == []
