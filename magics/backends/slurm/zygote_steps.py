"""This kernel's zygotes on Slurm nodes: one long-lived job step per (allocation, node, interpreter, import-time
environment), whose one task is a zygote (``node_zygote.py``), so that a worker placed on that node is forked with
TensorFlow already imported instead of importing it anew.

A launch asks ``ensure`` for the zygote steps of every node its workers go to (all started at once, each by its own
``srun``), then ``socket_for`` for each worker: the zygote's socket on the worker's node and its pid there (read from
the step's first line), which the worker's host, a step of its own on that node, gets as ``--zygote``/
``--zygote-pid``; the zygote forks the worker (``host/zygote_client.py``). A cold run pays one TensorFlow import per
node (in the zygote, while the workers' steps start), every later run, restart and session start a fork.
The worker stays a job step of its own (its host's): stop, stacks, ``scancel`` of its step (the host dies, the zygote
kills the worker it forked for it) and its exit code are as with a spawned worker.

Spawned instead (noted in the worker's log), as on one machine: zygotes off (``settings().zygote``), a cell that
changes its environment before TensorFlow is imported (``zygotes.why_not_forked``), a zygote step that did not say
where it listens within ``SlurmSettings.zygote_start_timeout`` or ended (the allocation's end, ``scancel``, its idle
timeout: the next launch starts another).

Lifetime: the kernel holds each step's ``srun`` stdin; the kernel's end, even by ``kill -9``, closes it, srun forwards
the end of file, and the zygote forks no more and exits once its children ended (their hosts stop them, having
read the same end of file): the step ends, none is left. A zygote idle for ``zygote_idle_timeout`` exits too. At most
``zygotes_max`` keys are kept per node (the oldest released). The steps are named ``nbwz-NODE-KEY``
(``commands.zygote_step_name``), apart from the workers' ``nbw-`` steps.
"""

from __future__ import annotations

import atexit
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from nbworkers.magics.backends.run_env import base_env
from nbworkers.magics.backends.slurm import commands
from nbworkers.magics.backends.slurm.allocation import Allocation, cancel
from nbworkers.magics.backends.slurm.node_zygote import ANNOUNCE
from nbworkers.magics.backends.zygotes import ZYGOTE_DIR_NAME, child_only, why_not_forked, zygote_key
from nbworkers.magics.settings import settings as current_settings
from nbworkers.procs.kill import kill_group
from nbworkers.procs.ownership import RUN_ID_ENV, ZYGOTE_MARKER_ENV
from nbworkers.protocol import cell_scan, wire
from nbworkers.protocol.private.dirs import module_command, runtime_dir
from nbworkers.protocol.private.files import open_own
from nbworkers.protocol.private.marker import RUN_ID_PLACEHOLDER

NODE_ZYGOTE_MODULE = "nbworkers.magics.backends.slurm.node_zygote"


@dataclass
class ZygoteStep:
    """One node's zygote step, held by this kernel's ``srun`` (its stdin: the zygote's life line)."""

    job_id: str
    node: str
    key: str
    name: str  # the step's name
    srun: subprocess.Popen
    started: float = field(default_factory=time.monotonic)
    socket: str = ""  # on the node, once the step said it
    pid: int = 0  # the zygote's pid on the node
    said: threading.Event = field(default_factory=threading.Event)

    def read_announce(self) -> None:
        """The step's first line (``ANNOUNCE SOCKET PID``), then drain its stdout to its end."""
        assert self.srun.stdout is not None
        for raw in self.srun.stdout:
            words = raw.decode(errors="replace").split()
            if not self.said.is_set() and len(words) == 3 and words[0] == ANNOUNCE and words[2].isdigit():
                self.socket, self.pid = words[1], int(words[2])
                self.said.set()
        self.said.set()  # ended without a word: socket stays ""

    def alive(self) -> bool:
        return self.srun.poll() is None

    def release(self) -> None:
        """End of file on the zygote's stdin: it forks no more and exits once its workers ended."""
        if self.srun.stdin is not None:
            try:
                self.srun.stdin.close()
            except OSError:
                pass

    def stop(self, grace: float, timeout: float, allocation: Allocation | None) -> None:
        self.release()
        try:
            self.srun.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            if allocation is not None:
                cancel(allocation.step_id(self.name, timeout), timeout)
            kill_group(self.srun.pid)  # our own child, not reaped: its pid is its own
            self.srun.wait()


class ZygoteSteps:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[tuple[str, str, str], ZygoteStep] = {}
        self._allocations: dict[str, Allocation] = {}

    def ensure(self, allocation: Allocation, nodes: list[str], python: str, env: dict[str, str], cwd: str) -> str:
        """Start (each with its own srun, at once) the zygote step of each of ``nodes`` that has none for this
        launch's key; "" when its workers may fork, else why they are spawned."""
        if not current_settings().zygote:
            return "spawned, not forked: zygotes are off (settings().zygote)"
        reason = why_not_forked(env.get(wire.ENV_CODE, ""), cwd, cell_scan.from_env(env))
        if reason is not None:
            return f"spawned, not forked: {reason}"
        key = zygote_key(python, env)
        with self._lock:
            self._allocations[allocation.job_id] = allocation
            for node in dict.fromkeys(nodes):
                step = self._steps.get((allocation.job_id, node, key))
                if step is not None and step.alive():
                    continue
                self._evict(allocation.job_id, node)
                self._steps[(allocation.job_id, node, key)] = self._start(allocation, node, key, python, env)
        return ""

    def socket_for(self, allocation: Allocation, node: str, python: str, env: dict[str, str],
                   start_timeout: float) -> tuple[str, int, str]:
        """(socket, pid, "") of ``node``'s zygote for this worker, or ("", 0, why it is spawned)."""
        with self._lock:
            step = self._steps.get((allocation.job_id, node, zygote_key(python, env)))
        if step is None:
            return "", 0, "spawned, not forked: no zygote step on this node"
        if not step.said.wait(start_timeout) or not step.socket:
            code = step.srun.poll()
            return "", 0, (f"spawned, not forked: the zygote step {step.name} on {node} did not say where it listens "
                           + (f"(srun ended with {code})" if code is not None else f"within {start_timeout:g} s"))
        if not step.alive():
            return "", 0, f"spawned, not forked: the zygote step {step.name} on {node} ended"
        return step.socket, step.pid, ""

    def _evict(self, job_id: str, node: str) -> None:
        """Forget ended steps; keep at most ``zygotes_max`` - 1 live ones on ``node`` (the oldest released)."""
        for where, step in list(self._steps.items()):
            if not step.alive():
                del self._steps[where]
        mine = sorted((s for (j, n, _), s in self._steps.items() if (j, n) == (job_id, node)), key=lambda s: s.started)
        while len(mine) >= max(1, current_settings().zygotes_max):
            oldest = mine.pop(0)
            del self._steps[(oldest.job_id, oldest.node, oldest.key)]
            oldest.release()  # the workers it forked for a running cluster finish first

    def _start(self, allocation: Allocation, node: str, key: str, python: str, env: dict[str, str]) -> ZygoteStep:
        config = current_settings()
        zygote_env = {k: v for k, v in base_env(env).items() if k not in child_only()}
        zygote_env[ZYGOTE_MARKER_ENV] = str(config.run_root)
        zygote_env[RUN_ID_ENV] = RUN_ID_PLACEHOLDER  # a forked worker writes its run's id over it (marker.py)
        zygote_env["PYTHONUNBUFFERED"] = "1"
        name = commands.zygote_step_name(node, key)
        socket_name = f"{key[:8]}-{os.getpid()}-{secrets.token_hex(4)}"
        task = module_command(sys.executable, NODE_ZYGOTE_MODULE, socket_name, str(config.zygote_idle_timeout),
                              python or sys.executable)
        srun_log = runtime_dir(ZYGOTE_DIR_NAME) / f"slurm-{allocation.job_id}-{node}-{socket_name}.srun.log"
        with os.fdopen(open_own(srun_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as log:  # no link followed
            srun = subprocess.Popen(commands.srun_command(allocation.job_id, node, name, task), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=log, env=commands.step_env(zygote_env),
                                    cwd=str(srun_log.parent), start_new_session=True, close_fds=True)
        step = ZygoteStep(allocation.job_id, node, key, name, srun)
        threading.Thread(target=step.read_announce, name=f"nbworkers-{name}", daemon=True).start()
        return step

    def close(self) -> None:
        with self._lock:
            steps, self._steps = list(self._steps.values()), {}
        config = current_settings()
        for step in steps:
            step.release()
        for step in steps:
            step.stop(config.zygote_stop_timeout, 10.0, self._allocations.get(step.job_id))


_steps: ZygoteSteps | None = None
_steps_lock = threading.Lock()


def zygote_steps() -> ZygoteSteps:
    """This kernel's zygote steps (stopped at its exit)."""
    global _steps
    with _steps_lock:
        if _steps is None:
            _steps = ZygoteSteps()
            atexit.register(_steps.close)
        return _steps
