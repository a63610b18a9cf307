"""``python -m nbworkers.procs.grandchild -- CMD``: CMD as a grandchild that outlives a SIGKILL of its parent (what a
Ray actor's exit does to its direct children: ray/nodes/host_actor.py), with CMD's exit seen through it. Real tiny processes,
no TensorFlow."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
from conftest import wait_until

from nbworkers.procs.kill import kill_group
from nbworkers.protocol.private.dirs import module_command

GONE_TIMEOUT = 20


def grandchild(*command: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(module_command(sys.executable, "nbworkers.procs.grandchild", "--", *command),
                            start_new_session=True, **popen)


def test_the_exit_code_and_the_killing_signal_are_passed_on():
    assert grandchild(sys.executable, "-c", "raise SystemExit(7)").wait(GONE_TIMEOUT) == 7
    killed = grandchild(sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert killed.wait(GONE_TIMEOUT) == -signal.SIGTERM


def test_the_command_outlives_a_sigkill_of_its_parent_and_ends_at_the_end_of_its_stdin(tmp_path):
    done = tmp_path / "done"
    wait_eof = f"import sys, pathlib\nsys.stdin.read()\npathlib.Path({str(done)!r}).write_text('end of file')"
    parent = grandchild(sys.executable, "-c", wait_eof, stdin=subprocess.PIPE)
    assert wait_until(lambda: psutil.Process(parent.pid).children(), GONE_TIMEOUT, interval=0.05)
    command = psutil.Process(parent.pid).children()[0]
    try:
        parent.kill()  # as an exiting Ray worker process does to its children
        assert parent.wait(GONE_TIMEOUT) == -signal.SIGKILL
        time.sleep(0.3)
        assert command.is_running() and not done.exists()  # alive, its stdin still open: the test holds the pipe
        assert parent.stdin is not None
        parent.stdin.close()  # the writer goes: end of file
        assert wait_until(lambda: not command.is_running() or command.status() == psutil.STATUS_ZOMBIE,
                          GONE_TIMEOUT, interval=0.05)
        assert done.read_text() == "end of file"
    finally:
        kill_group(parent.pid)  # its group (the command's too) if a check failed
