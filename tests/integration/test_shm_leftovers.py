"""A squatted shared-memory folder and a killed kernel, for real (``session_shm.sweep_stale``): ``nobody``
(``setpriv``) makes ``nbworkers-data-<uid>`` first in a folder like ``/dev/shm`` (1777); a process of ours that
pushes through shared memory then gets a fall-back folder of its own, named after it, with its file. While it
lives the sweep leaves both alone; once it is killed with ``kill -9`` the sweep removes its fall-back folder whole,
and the squatter's folder stays as it was. The sweep's rules one by one: tests/unit/test_shm_leftovers.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ended, wait_until

from nbworkers.protocol import session_shm

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
PUSHER = """\
import sys, time
from nbworkers.protocol import session_shm
session_shm.SHM_BASE = sys.argv[1]
files = session_shm.ShmFiles()
path = files.path("push")
files.write(path, [b"x" * 4096])
print(path, flush=True)
time.sleep(600)
"""


@pytest.fixture
def fake_shm():
    base = Path(tempfile.mkdtemp(prefix="nbworkers-fake-shm-", dir="/tmp"))
    base.chmod(0o1777)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"), reason="another user needs root and setpriv")
def test_a_killed_kernels_fall_back_folder_beside_a_squatted_one_is_swept(fake_shm):
    squatted = fake_shm / f"nbworkers-data-{os.getuid()}"
    done = subprocess.run([*NOBODY, sys.executable, "-I", "-c",
                           f"import os; os.mkdir({str(squatted)!r}, 0o700); "
                           f"open({str(squatted / 'theirs')!r}, 'w').close()"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pusher = subprocess.Popen([sys.executable, "-c", PUSHER, str(fake_shm)], stdout=subprocess.PIPE, text=True)
    try:
        path = Path(pusher.stdout.readline().strip())
        folder = path.parent
        assert folder != squatted and folder.parent == fake_shm and path.is_file()
        match = session_shm.FALLBACK.match(folder.name)
        assert match and int(match["pid"]) == pusher.pid
        assert session_shm.sweep_stale(str(fake_shm)) == [] and path.is_file()  # its maker lives
    finally:
        os.kill(pusher.pid, signal.SIGKILL)  # the process this test started
        pusher.wait()
    assert wait_until(lambda: ended(pusher.pid), 10)
    assert session_shm.sweep_stale(str(fake_shm)) == [folder.name]
    assert not folder.exists()
    assert sorted(os.listdir(squatted)) == ["theirs"] and squatted.stat().st_uid != os.getuid()
    assert sorted(os.listdir(fake_shm)) == [squatted.name]
