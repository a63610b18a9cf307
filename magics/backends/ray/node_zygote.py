"""The node side of per-node zygotes: a Ray actor that keeps one zygote (``nbworkers.distlib.worker.zygote``) on
its node for the kernel, so that workers placed there fork with TensorFlow already imported.

One actor per (node, interpreter, import-time environment) and kernel (``node_zygotes.NodeZygotes``), pinned to
its node (``NodeAffinitySchedulingStrategy``, no CPU of its own). ``start`` starts the zygote as the actor's
child, in a session of its own, holding a pipe to its stdin, and returns its socket (a private directory on the
node, ``nbworkers-ray-zygote``); a worker's host on that node gets ``--zygote SOCKET`` and asks it for the fork
as a local host does (host/zygote_client.py; when it cannot, the host spawns the worker, noted in its log).

Lifetime as on one machine: the zygote exits after ``zygote_idle_timeout`` without work (``start`` starts a new
one when asked again), and at end of file on its stdin — the actor's death, which the kernel's death (even
``kill -9``) brings, since the kernel, the Ray driver, owns the actor — it forks no more and exits once its
children have ended (their hosts stop them). It carries the kernel's run root as ``NBWORKERS_SPARE`` (found by
the tests' stray checks) and the run-id placeholder its children write their run's id over, like a local one.

Imported on the nodes (nbworkers installed there): no TensorFlow, no IPython; Ray only inside the methods.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

from nbworkers.host.command import ZYGOTE_MODULE
from nbworkers.magics.backends.ray.node import ACTOR_ENV
from nbworkers.magics.backends.run_env import base_env
from nbworkers.magics.backends.zygotes import child_only
from nbworkers.procs.ownership import RUN_ID_ENV, ZYGOTE_MARKER_ENV
from nbworkers.protocol.private.dirs import module_command, socket_path
from nbworkers.protocol.private.marker import RUN_ID_PLACEHOLDER

NODE_ZYGOTE_DIR = "nbworkers-ray-zygote"


class NbworkersNodeZygote:
    """Keeps one zygote on its node. Wrapped with ``ray.remote`` by ``node_zygotes``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
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
            env = {k: v for k, v in os.environ.items() if k not in ACTOR_ENV}
            env.update(request["env"])
            env = {k: v for k, v in base_env(env).items() if k not in child_only()}
            env[ZYGOTE_MARKER_ENV] = request["marker"]
            env[RUN_ID_ENV] = RUN_ID_PLACEHOLDER  # a forked worker writes its run's id over it (marker.py)
            env["PYTHONUNBUFFERED"] = "1"
            sock = socket_path(NODE_ZYGOTE_DIR, f"{request['name']}.sock")
            log = sock.with_suffix(".log")
            with open(log, "ab") as out:
                os.chmod(log, 0o600)
                self._proc = subprocess.Popen(
                    module_command(python, ZYGOTE_MODULE, "--socket", str(sock), "--idle-timeout",
                                   str(request["idle_timeout"]), unbuffered=True),
                    stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(sock.parent),
                    start_new_session=True, close_fds=True,
                )
            self._socket, self._log = str(sock), str(log)
            return self._facts()

    def _facts(self) -> dict[str, Any]:
        assert self._proc is not None
        return {"socket": self._socket, "pid": self._proc.pid, "log": self._log}
