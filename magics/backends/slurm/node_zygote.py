"""The one task of a node's zygote step (``zygote_steps.py``), on its node: start the zygote, say where it listens,
and end it with the kernel.

``python -m nbworkers.magics.backends.slurm.node_zygote NAME IDLE_TIMEOUT PYTHON``: the socket's path on this node
(a private directory of this user there: ``dirs.socket_path``); the zygote (``nbworkers.distlib.worker.zygote``,
under the workers' ``PYTHON``) started as this task's child, its output in a log beside the socket; then
``ANNOUNCE SOCKET PID`` on stdout (the kernel reads it through srun). This task then reads its stdin (srun's,
forwarded from the kernel's pipe): at its end of file (the kernel's exit, even by ``kill -9``, or the kernel dropping
this zygote) the zygote's own stdin is closed: a zygote that serves forks no more and exits once its children ended
(their hosts stop them, having read the same end of file); one still in its imports, which reads its stdin only once
they are done (tens of seconds on a busy node), is killed at once. The step ends when the zygote has.

Standard library and ``protocol``/``host`` helpers only: started on the nodes, it must start fast.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

from nbworkers.host.command import ZYGOTE_MODULE, zygote_serving
from nbworkers.protocol.private.dirs import module_command, socket_path
from nbworkers.protocol.private.files import open_own

NODE_ZYGOTE_DIR = "nbworkers-slurm-zygote"
ANNOUNCE = "nbworkers-zygote-at"
LOOK_INTERVAL = 1.0  # seconds between looks at the zygote while the kernel says nothing


def main(argv: list[str] | None = None) -> int:
    name, idle_timeout, python = (sys.argv[1:] if argv is None else argv)[:3]
    sock = socket_path(NODE_ZYGOTE_DIR, f"{name}.sock")
    log_path = str(sock.with_suffix(".log"))
    log = open_own(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # no link followed, this user's own file
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the kernel ends this step by its stdin, not by signals
    zygote = subprocess.Popen(
        module_command(python, ZYGOTE_MODULE, "--socket", str(sock), "--idle-timeout", idle_timeout, unbuffered=True),
        stdin=subprocess.PIPE, stdout=log, stderr=log, cwd=str(sock.parent), close_fds=True)
    os.close(log)
    print(ANNOUNCE, sock, zygote.pid, flush=True)
    while zygote.poll() is None:  # (a zygote idle for IDLE_TIMEOUT exits by itself: the step ends with it)
        if not select.select([sys.stdin], [], [], LOOK_INTERVAL)[0]:
            continue
        try:
            if os.read(sys.stdin.fileno(), 4096):
                continue
        except OSError:
            pass
        break  # end of file: the kernel is gone, or it dropped this zygote
    if zygote.poll() is None and not zygote_serving(log_path):
        zygote.kill()  # in its imports: it would notice only once they are done
        zygote.wait()
        return 0
    if zygote.stdin is not None:
        zygote.stdin.close()
    return zygote.wait()


if __name__ == "__main__":
    sys.exit(main())
