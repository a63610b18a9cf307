"""The node side of per-node zygotes: a Ray actor that keeps one zygote (``nbworkers.distlib.worker.zygote``) on
its node for the kernel, so that workers placed there fork with TensorFlow already imported.

One actor per (node, interpreter, import-time environment) and kernel (``ray/node_zygotes.NodeZygotes``), pinned to
its node (``NodeAffinitySchedulingStrategy``, no CPU of its own). ``start`` starts the zygote as the actor's
grandchild (below), in a session of its own, holding a pipe to its stdin, and returns its socket (a private
directory on the node, ``nbworkers-ray-zygote``); a worker's host on that node gets ``--zygote SOCKET`` and asks it
for the fork as a local host does (host/zygote_client.py; when it cannot, the host spawns the worker, noted in its
log).

Lifetime as on one machine: the zygote exits after ``zygote_idle_timeout`` without work (``start`` starts a new
one when asked again), and at end of file on its stdin — the actor's death, which the kernel's death (even
``kill -9``) brings, since the kernel, the Ray driver, owns the actor — it forks no more and exits once its
children have ended (their hosts stop them). For that the zygote is the actor's grandchild, as a worker's host is
(``nbworkers.procs.grandchild`` between them: host_actor.py's docstring): an exiting Ray worker process SIGKILLs its
direct children. The actor has no ``runtime_env``, so Ray starts it as any worker process, without
``setup_worker.py``'s second import of Ray: 1.7-1.8 s of CPU per actor instead of 3.6-3.7 s (traced on the
benchmark's simulated cluster, jsonschema's IRI grammar installed there). The zygote's own pid, which a host checks
at the socket (``SO_PEERCRED``), is that small process's child's. The zygote carries the kernel's run root as
``NBWORKERS_SPARE`` (found by the tests' stray checks) and the run-id placeholder its children write their run's id
over, like a local one.

Imported on the nodes (nbworkers installed there): no TensorFlow, no IPython; Ray only inside the methods.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Any

import psutil

from nbworkers.host.command import ZYGOTE_MODULE
from nbworkers.magics.backends.ray.nodes.host_actor import GRANDCHILD_MODULE
from nbworkers.magics.backends.run_env import base_env
from nbworkers.magics.backends.zygotes import child_only
from nbworkers.procs.ownership import RUN_ID_ENV, ZYGOTE_MARKER_ENV
from nbworkers.protocol.private.dirs import module_command, socket_path
from nbworkers.protocol.private.marker import RUN_ID_PLACEHOLDER

NODE_ZYGOTE_DIR = "nbworkers-ray-zygote"
CHILD_WAIT = 5.0  # seconds for procs.grandchild to start the zygote (a few milliseconds on a quiet node)


class NbworkersNodeZygote:
    """Keeps one zygote on its node. Wrapped with ``ray.remote`` by ``node_zygotes``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None  # procs.grandchild's process, the zygote's parent
        self._pid: int | None = None  # the zygote's
        self._socket = ""
        self._log = ""

    def start(self, request: dict[str, Any]) -> dict[str, Any]:
        """The running zygote, started now if there is none (or it exited idle). ``request``: python ("" = this
        node's interpreter), env (the import-time variables the kernel forwards), idle_timeout, marker (the
        kernel's run root), name (of the socket file)."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return self._facts()
            python = request["python"] or sys.executable
            env = dict(os.environ)
            env.update(request["env"])
            env = {k: v for k, v in base_env(env).items() if k not in child_only()}
            env[ZYGOTE_MARKER_ENV] = request["marker"]
            env[RUN_ID_ENV] = RUN_ID_PLACEHOLDER  # a forked worker writes its run's id over it (marker.py)
            env["PYTHONUNBUFFERED"] = "1"
            sock = socket_path(NODE_ZYGOTE_DIR, f"{request['name']}.sock")
            log = sock.with_suffix(".log")
            with open(log, "ab") as out:
                os.chmod(log, 0o600)
                zygote = module_command(python, ZYGOTE_MODULE, "--socket", str(sock), "--idle-timeout",
                                        str(request["idle_timeout"]), unbuffered=True)
                self._proc = subprocess.Popen(  # procs.grandchild's process: the zygote's group and exit code
                    module_command(sys.executable, GRANDCHILD_MODULE, "--", *zygote), stdin=subprocess.PIPE,
                    stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(sock.parent), start_new_session=True,
                    close_fds=True,
                )
            self._pid = _child_pid(self._proc)
            self._socket, self._log = str(sock), str(log)
            return self._facts()

    def _facts(self) -> dict[str, Any]:
        return {"socket": self._socket, "pid": self._pid, "log": self._log}


def _child_pid(proc: subprocess.Popen, timeout: float = CHILD_WAIT) -> int | None:
    """The pid of ``proc``'s first child (the zygote procs.grandchild starts); None when it has none within
    ``timeout`` or ended (the host then forks without checking the pid at the socket, or spawns)."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            children = psutil.Process(proc.pid).children()
        except psutil.Error:
            return None
        if children:
            return children[0].pid
        time.sleep(0.01)
    return None
