"""A local session's push and pull of 64 MiB through shared memory (``protocol/session_shm.py``), in a real kernel
with a real 2-worker plain-Python session: the values come back equal, the pulled array is a read-only mapping,
and no file of the session is left in the private folder afterwards, nor after a worker killed with a push it
never opened."""

from __future__ import annotations

import os
import signal

import pytest
from conftest import processes_of_run_root, wait_until

pytestmark = pytest.mark.timeout(240)

START = """%%worker -n 2 --session shm --block
import numpy as np
"""
PUSH_PULL = """
import numpy as np
session = nbworkers.session("shm")
big = np.random.default_rng(0).random(16 * 2**20, dtype=np.float32)  # 64 MiB
session.push(big=big)
back = session.pull("big * 2", worker=1)
sums = [session.pull("float(big.astype('float64').sum())", worker=w) for w in (0, 1)]
def memory_of(array):  # what a received array's bytes live in: an mmap here, a zmq.Frame for the socket path
    while isinstance(array, np.ndarray):
        array = array.base
    return type(getattr(array, "obj", array)).__name__
def left():  # this session's files still in the shared-memory folder
    return [p.name for c in (session.channel, session.data_channel) for p in c.shm.left()]
"""


def test_a_64_mib_push_and_pull_go_through_shared_memory_and_leave_no_file(kernel, run_root):
    k = kernel
    assert not k.run(START).error
    result = k.run(PUSH_PULL)
    assert not result.error, result.text
    assert k.value("bool(np.array_equal(back, big * 2)) and back.dtype == np.float32 and back.shape == big.shape")
    assert k.value("sums == [float(big.astype('float64').sum())] * 2")
    assert k.value("not back.flags.writeable and memory_of(back)") == "mmap"  # a read-only view of the mapping
    assert k.value("str(session.channel.shm.folder).startswith('/dev/shm/')") == os.path.isdir("/dev/shm")
    assert k.value("left()") == []
    assert k.value("session.snapshot()['dropped'].get('data', 0)") == 0

    # a worker stopped before it opens a push, then killed: the restart sweeps the file
    pid = k.value("session.snapshot()['workers'][0]['pid']")
    restarts = k.value("session.restarts")
    os.kill(pid, signal.SIGSTOP)
    try:
        assert not k.run("session.push(workers=[0], again=big)").error
        assert len(k.value("left()")) == 1
    finally:
        os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: k.value("session.restarts") > restarts, 60, interval=0.5)
    # the count goes up when the restart is decided; the sweep comes with the new generation's start, once the old
    # processes are stopped (channel.new_generation)
    assert wait_until(lambda: k.value("left()") == [], 60, interval=0.5), k.value("left()")
    assert k.value("float(session.pull('__import__(\"numpy\").ones(2**18)', worker=0).sum())") == 2.0**18  # goes on
    assert k.value("left()") == []

    folder = k.value("str(session.channel.shm.folder)")
    prefixes = k.value("[session.channel.shm.prefix, session.data_channel.shm.prefix]")
    assert not k.run("%workers stop shm").error
    assert wait_until(lambda: not processes_of_run_root(run_root), 20)
    assert not [n for n in os.listdir(folder) if n.split("-")[0] in prefixes]
