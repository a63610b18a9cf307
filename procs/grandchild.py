"""``python -m nbworkers.procs.grandchild -- CMD ...``: run CMD as this process's child and exit as CMD did.

For a parent that kills its direct children when it exits: a Ray worker process (an actor) does, by default
(``RAY_kill_child_processes_on_worker_exit``: SIGKILL to every process whose parent it is). Started through this,
CMD is the parent's grandchild: when the parent exits, this process is killed and CMD goes on (its parent becomes
init or the nearest subreaper), so it can end its own way — a worker host, seeing its stdin pipe from the actor
close, stops its worker group with the grace a stop has (``ray/nodes/host_actor.py``). Setting the variable to false
for the actor would do the same, but only through the actor's ``runtime_env``, and Ray starts a worker process with a
``runtime_env`` through one more interpreter that imports all of Ray first (``setup_worker.py``: ~2 s of CPU per
actor, measured: docs/ray.md, "What a first cell costs").

CMD inherits this process's stdin, stdout, stderr, environment, session and process group (so a SIGKILL of the
group reaches both), but not its signal mask: CMD starts with no signal blocked. (A Ray actor's methods run in
threads that block SIGINT, and a child inherits its parent thread's mask through ``exec``: a worker host started
from there passed it on to its worker, whose stop's SIGINT then never came, and the cell's ``finally:`` never ran.)
This process closes its own stdin (CMD's end of file then depends on the writer only), waits, and exits with CMD's
code, or kills itself with the signal that killed CMD: whoever waits for it sees what it would have seen of CMD.
Standard library only: it starts in a few milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[1:] if args[:1] == ["--"] else args
    if not command:
        print("usage: python -m nbworkers.procs.grandchild -- CMD [ARGS...]", file=sys.stderr)
        return 2
    signal.pthread_sigmask(signal.SIG_SETMASK, set())  # CMD starts with no signal blocked (a mask is inherited)
    child = subprocess.Popen(command)  # stdin, stdout and stderr are CMD's
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a SIGINT to the group is CMD's to handle (after the start:
    # an ignored signal would stay ignored in CMD)
    try:
        os.close(0)
    except OSError:
        pass
    code = child.wait()
    if code < 0:  # killed by signal -code: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
