"""A real zygote (without TensorFlow's preload, to stay quick) and a real host: a forked worker marks itself with
its run's id in its own /proc environment (the zygote keeps its placeholder), and when the worker exits, nothing
it left in its process group lives on (the zygote kills the group before it reaps the worker, the host kills it
too: which one comes first is the scheduler's choice, so this checks the outcome)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import psutil
from conftest import ended, wait_until

from nbworkers.protocol.private.dirs import module_command
from nbworkers.protocol.private.marker import RUN_ID_PLACEHOLDER

RUN_ID = "0123456789abcdef01234567"
TIMEOUT = 60
ZYGOTE = textwrap.dedent("""
    import sys
    from nbworkers.distlib.worker import zygote
    sys.exit(zygote.Zygote(sys.argv[1]).serve())
""")
CELL = textwrap.dedent("""
    import os, subprocess, sys
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # same process group
    marker = [v for v in open("/proc/self/environ", "rb").read().split(b"\\0") if v.startswith(b"NBWORKERS_RUN_ID=")]
    print("WORKER", os.getpid(), "LEFT", left.pid, "MARK", marker[0].decode(), flush=True)
""")


def test_a_forked_worker_carries_its_run_id_and_leaves_nothing_in_its_group(tmp_path):
    socket_path = tmp_path / "z.sock"
    zygote_env = {k: v for k, v in os.environ.items() if not k.startswith("NBWORKERS_")}
    zygote_env["NBWORKERS_RUN_ID"] = RUN_ID_PLACEHOLDER
    zygote = subprocess.Popen([sys.executable, "-c", ZYGOTE, str(socket_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
                              env=zygote_env)
    cell = tmp_path / "cell.py"
    cell.write_text(CELL)
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBWORKERS_")}
    env.update({"NBWORKERS_CODE": str(cell), "NBWORKERS_CWD": str(tmp_path), "NBWORKERS_RUN_ID": RUN_ID})
    command = [*module_command(sys.executable, "nbworkers.host.worker_host", "--log", str(log), "--zygote",
                               str(socket_path)),
               "--", *module_command(sys.executable, "nbworkers.distlib.worker.bootstrap", unbuffered=True)]
    left = None
    try:
        host = subprocess.Popen(command, stdin=subprocess.PIPE, env=env, cwd=tmp_path)  # its stdin: the "kernel"
        code = host.wait(timeout=TIMEOUT)
        host.stdin.close()
        text = log.read_text()
        assert code == 0 and "forked from zygote" in text, text
        found = re.search(r"WORKER (\d+) LEFT (\d+) MARK (\S+)", text)
        assert found, text
        left = int(found.group(2))
        assert found.group(3) == f"NBWORKERS_RUN_ID={RUN_ID}"  # written over the placeholder, in place
        assert psutil.Process(zygote.pid).environ()["NBWORKERS_RUN_ID"] == RUN_ID_PLACEHOLDER
        assert wait_until(lambda: ended(left), TIMEOUT), "the worker's child lived on"
    finally:
        if left is not None and psutil.pid_exists(left):
            try:
                os.kill(left, 9)
            except ProcessLookupError:
                pass
        zygote.stdin.close()
        zygote.wait(timeout=TIMEOUT)
