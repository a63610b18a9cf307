"""Trust on every node, the attacks that need another user's process (issue 32): a socket put in the zygote's
place by ``nobody`` (``setpriv``) gets nothing of the worker host's environment, and the host spawns its worker
instead, saying why in the worker's log. The checks that need no process are in tests/unit/test_security_nodes.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from nbworkers.protocol.private.dirs import module_command

pytestmark = pytest.mark.timeout(300)
HOST_MODULE = "nbworkers.host.worker_host"
OTHER_PYTHON = "/usr/bin/python3.11"  # the venv's interpreter may live where nobody may read
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
NOBODY_UID = 65534

# As nobody: listen where the zygote's socket would be, keep whatever a host sends, never answer.
FAKE_ZYGOTE = """
import socket, sys
path, got = sys.argv[1], sys.argv[2]
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(4)
print("LISTENING", flush=True)
while True:
    conn, _ = server.accept()
    data = b""
    conn.settimeout(10)
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    with open(got, "ab") as out:
        out.write(b"%d bytes\\n" % len(data))
"""


def as_nobody_available() -> bool:
    return os.getuid() == 0 and shutil.which("setpriv") is not None and os.path.exists(OTHER_PYTHON)


@pytest.mark.skipif(not as_nobody_available(), reason="acting as another user needs root and setpriv")
def test_a_socket_another_user_put_in_the_zygotes_place_gets_nothing_and_the_worker_is_spawned(tmp_path):
    theirs = Path(tempfile.mkdtemp(prefix="nbworkers-test-nobody-", dir="/tmp"))  # pytest's tmp_path is root's 0700
    theirs.chmod(0o755)
    os.chown(theirs, NOBODY_UID, NOBODY_UID)
    sock, got = theirs / "zygote.sock", theirs / "got.txt"
    fake = subprocess.Popen([*AS_NOBODY, OTHER_PYTHON, "-I", "-c", FAKE_ZYGOTE, str(sock), str(got)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert fake.stdout is not None and fake.stdout.readline().strip() == b"LISTENING"
        assert os.stat(sock).st_uid == NOBODY_UID
        log = tmp_path / "worker.log"
        secret = "a-run-key-nobody-may-see"
        env = {**os.environ, "NBWORKERS_KEY": secret}
        env.pop("NBWORKERS_RELAY", None)
        # its stdin stays open while it runs, as a kernel's pipe does (end of file means the kernel is gone: the host
        # then stops its worker, which CI once caught still starting: KeyboardInterrupt, exit code 1)
        with open(tmp_path / "host.out", "wb") as out:
            host = subprocess.Popen(
                module_command(sys.executable, HOST_MODULE, "--log", str(log), "--zygote", str(sock),
                               "--zygote-timeout", "10", "--zygote-connect-timeout", "5", "--",
                               sys.executable, "-c", "print('spawned, not forked', flush=True)"),
                env=env, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)
            try:
                code = host.wait(timeout=120)
            finally:
                assert host.stdin is not None
                host.stdin.close()
        text = log.read_text()
        assert code == 0, ((tmp_path / "host.out").read_text(), text)
        assert f"belongs to user id {NOBODY_UID}, not to you" in text and "nothing was sent to it" in text, text
        assert "spawned, not forked" in text, text
        deadline = time.monotonic() + 15  # the fake writes what it got once the host closed the connection
        while not got.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert got.read_text().splitlines() == ["0 bytes"]  # not the environment, not the key, not a descriptor
    finally:
        os.killpg(fake.pid, signal.SIGKILL)
        fake.wait(30)
        shutil.rmtree(theirs, ignore_errors=True)


def test_a_kernel_whose_tmpdir_others_may_write_makes_nothing_there_and_says_what_to_set(tmp_path, kernel_env,
                                                                                          run_root):
    """TMPDIR on a world-writable folder without the sticky bit (as on some HPC scratch): a run refuses, saying to
    set NBWORKERS_RUNTIME_DIR, nothing of nbworkers is made there; with NBWORKERS_RUNTIME_DIR set, the run works."""
    from conftest import Kernel, processes_of_run_root, wait_until

    scratch = tmp_path / "scratch"  # as HPC scratch may be: anyone may write, no sticky bit
    scratch.mkdir(mode=0o700)
    os.chmod(scratch, 0o777)
    ipykernel = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    k = Kernel(tmp_path, {**kernel_env, "TMPDIR": str(scratch)}, kernel_cmd=ipykernel)  # its cwd: tmp_path
    try:
        loaded = k.run("%load_ext nbworkers\nimport nbworkers")
        assert not loaded.error, loaded.error
        refused = k.run("%%worker -n 1 --name scratch-run --block\nprint('ran')")
        assert refused.status == "error" and "no sticky bit" in refused.text and "NBWORKERS_RUNTIME_DIR" in refused.text, \
            refused.text
        assert "Traceback" not in refused.text  # the message and what to do, not a traceback
        assert not [p.name for p in scratch.iterdir() if p.name.startswith("nbworkers")]
        private = tmp_path / "private-runtime"
        ran = k.run(f"%env NBWORKERS_RUNTIME_DIR={private}\n")
        assert not ran.error, ran.text
        ran = k.run("%%worker -n 1 --name scratch-run2 --block\nprint('ran here')")
        assert not ran.error, ran.text
        assert "ran here" in ran.text
        assert os.stat(private).st_mode & 0o777 == 0o700 and any(private.iterdir())
        assert not [p.name for p in scratch.iterdir() if p.name.startswith("nbworkers")]
    finally:
        k.shutdown()
    assert wait_until(lambda: not processes_of_run_root(run_root, zygotes=True), 15)
