"""``python -m nbworkers.procs.tied -- CMD ...``: run CMD for as long as the kernel lives, then stop it.

The kernel starts this with a pipe on its stdin and never writes to it. CMD runs in its own process group
(the notebook's Interrupt button does not reach it). When the pipe closes — the kernel exited, or died even by
``kill -9`` — or this process gets SIGTERM, CMD's whole group gets SIGTERM, then SIGKILL after ``--grace``
seconds. When CMD exits on its own, this exits with its code. (The worker hosts do the same for workers; this is
the small general version, used for TensorBoard.)
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys

DEFAULT_GRACE = 3.0  # seconds between SIGTERM and SIGKILL of CMD's group
POLL_INTERVAL = 0.5  # seconds between checks that CMD still runs


def stop_group(pgid: int, child: subprocess.Popen, grace: float) -> None:
    """TERM CMD's group, up to ``grace`` s, KILL (``process_kill``), then reap CMD."""
    from nbworkers.procs.kill import kill_group  # lazily: psutil, only at the end

    kill_group(pgid, grace)
    try:
        child.wait(grace)
    except subprocess.TimeoutExpired:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbworkers.procs.tied")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            stop_group(child.pid, child, args.grace)

    signal.signal(signal.SIGTERM, stop)
    stdin = sys.stdin.fileno()
    while child.poll() is None:
        try:
            readable, _, _ = select.select([stdin], [], [], POLL_INTERVAL)
            if readable and not os.read(stdin, 4096):
                stop()  # end of file: the kernel is gone
        except InterruptedError:
            continue
        except OSError:
            stop()
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
