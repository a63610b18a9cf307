"""Another user filling the shared-memory file system does not stop a local session's pushes: with its folder on a
1 MiB tmpfs that ``nobody`` filled (``setpriv``; mode 1777, as ``/dev/shm``), a real 2-worker plain-Python session's
``push`` and ``scatter`` of 2 MiB and more go over the socket instead (ENOSPC), every value arrives whole, the cell
is told once (not per push), and no file is left (magics/sessions/channel.py). The unit side (a fake folder whose
write fails): tests/unit/test_sessions_push_fallback.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import processes_of_run_root, wait_until

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"),
                                 reason="a tmpfs and another user need root and setpriv")]

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
FILL = """\
import errno
with open({path!r}, "wb", buffering=0) as f:
    try:
        while True:
            f.write(b"x" * 4096)
    except OSError as error:
        assert error.errno == errno.ENOSPC, error
"""
START = """%%worker -n 2 --session full --block
import numpy as np
"""
SAID = "nbworkers: a push through shared memory failed"


@pytest.fixture
def full_shm():
    """A 1 MiB tmpfs (mode 1777) with a private folder of ours in it, filled by ``nobody``."""
    base = Path(tempfile.mkdtemp(prefix="nbworkers-shm-", dir="/tmp"))
    base.chmod(0o755)
    mount = base / "shm"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=1777", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(base)
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        ours = mount / f"nbworkers-data-{os.getuid()}"
        ours.mkdir(mode=0o700)
        filled = subprocess.run([*NOBODY, sys.executable, "-I", "-c", FILL.format(path=str(mount / "filler"))],
                                capture_output=True, text=True, timeout=60)
        assert filled.returncode == 0, filled.stderr
        assert (mount / "filler").stat().st_uid != os.getuid()
        yield ours
    finally:
        subprocess.run(["umount", str(mount)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_pushes_and_scatters_go_over_the_socket_when_another_user_fills_shared_memory(kernel, run_root, full_shm):
    k = kernel
    started = k.run(START)
    assert not started.error, started.text
    moved = k.run(f"""
import numpy as np
from nbworkers.protocol import session_shm
session = nbworkers.session("full")
session.channel.shm.sweep(close=True)
session.channel.shm = session_shm.ShmFiles({str(full_shm)!r})  # the session's push folder: the full tmpfs
big = np.random.default_rng(0).random(2**18)  # 2 MiB
""")
    assert not moved.error, moved.text
    pushed = k.run("session.push(big=big)\nsession.push(again=big * 2)\nsession.scatter('part', np.arange(2**19))")
    assert not pushed.error, pushed.text
    assert pushed.stderr.count(SAID) == 1 and "No space left on device" in pushed.stderr, pushed.text
    assert k.value("[session.pull('float(big.sum())', worker=w) for w in (0, 1)] == [float(big.sum())] * 2")
    assert k.value("[session.pull('float((again - big * 2).any())', worker=w) for w in (0, 1)]") == [0.0, 0.0]
    assert k.value("[session.pull('(int(part[0]), len(part))', worker=w) for w in (0, 1)]") == [[0, 2**18],
                                                                                                 [2**18, 2**18]]
    again = k.run("session.push(third=big)")
    assert not again.error and SAID not in again.stderr, again.text  # said once, not per push
    assert k.value("session.pull('float(third.sum())', worker=1) == float(big.sum())")
    assert os.listdir(full_shm) == []  # the partial files were removed
    assert not k.run("%workers stop full").error
    assert wait_until(lambda: not processes_of_run_root(run_root), 20)
