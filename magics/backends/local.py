"""The local backend: each worker is a fresh interpreter under a host process (see ``host``), on this machine.

Every host runs in a session of its own (so the notebook's Interrupt button, which signals the kernel's
process group, never reaches it) and holds a pipe from the kernel on its stdin (so a dead kernel, even one
killed with ``kill -9``, takes its workers with it).

A worker is forked from the kernel's zygote for its interpreter and import-time environment (``zygotes``:
TensorFlow imported once; its host supervises it as any worker) unless zygotes are off or cannot serve it;
then it is spawned: a fresh interpreter that imports TensorFlow itself.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbworkers.host.command import host_command
from nbworkers.magics.backends.zygotes import zygotes
from nbworkers.magics.launch.gpus import assign_gpus, visible_gpus
from nbworkers.magics.launch.ports import pick_free_ports
from nbworkers.magics.settings import settings
from nbworkers.magics.shapes import Placement
from nbworkers.procs.kill import group_alive, kill_group, kill_groups
from nbworkers.procs.ownership import RUN_ID_ENV, RunMarker


@dataclass
class WorkerProcess:
    """One worker as the kernel sees it: its host process, and the worker's own pid once reported."""

    index: int
    host: subprocess.Popen
    log_path: Path
    worker_pid: int | None = None
    extra_pgids: list[int] = field(default_factory=list)
    marker: RunMarker | None = None  # what every process of this worker carries (ownership.py)

    def poll(self) -> int | None:
        """The worker's exit code (negative: killed by that signal), or None while it runs."""
        code = self.host.poll()
        if code is None:
            return None
        if code > 128:  # the host exits with 128+N when the worker died of signal N
            return -(code - 128)
        return code

    def _tell_host(self, command: str) -> None:
        stdin = self.host.stdin
        if stdin is None:
            return
        try:
            stdin.write(f"{command}\n".encode())
            stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def request_stop(self) -> None:
        """Ask the host to stop the worker group (TERM, grace, KILL); returns at once."""
        self._tell_host("stop")

    def dump_stacks(self) -> None:
        self._tell_host("stacks")

    def pgids(self) -> list[int]:
        groups = [self.host.pid]
        if self.worker_pid:
            groups.append(self.worker_pid)
        return groups + self.extra_pgids

    def kill(self) -> None:
        """SIGKILL the host's and the worker's process groups, now — only processes that are ours (same user,
        started after this launch and carrying the run's marker, or this kernel's zygote and the workers it forked:
        a pid reused by another program, or a bogus pid a worker reported, is never signalled)."""
        if self.marker is None:  # built without a launch (tests): only our own child host, not yet reaped
            if self.host.poll() is None:
                kill_group(self.host.pid)  # SIGKILL
            return
        kill_groups(self.pgids(), self.marker)  # process_kill.py

    def alive(self) -> bool:
        if self.host.poll() is None:
            return True
        pid = self.worker_pid
        return pid is not None and pid > 0 and group_alive(pid)

    def close(self) -> None:
        if self.host.stdin:
            try:
                self.host.stdin.close()
            except OSError:
                pass


class LocalBackend:
    name = "local"
    worker_host = "localhost"  # the address TF_CONFIG gives every worker

    def relay_hosts(self) -> tuple[str, str | None]:
        """(bind, advertise) addresses of the kernel's relay: the workers are on this machine."""
        return "127.0.0.1", None

    def plan(self, tasks: list, gpus_per_worker: int | None) -> list[Placement]:
        """Every worker on this machine: ports free here, an equal share of the visible GPUs (or as asked)."""
        gpu_lists = assign_gpus(len(tasks), gpus_per_worker, visible_gpus())
        return [Placement(self.worker_host, port, gpus) for port, gpus in zip(pick_free_ports(len(tasks)), gpu_lists)]

    def launch(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path,
               grace: float, role: str = "worker") -> WorkerProcess:
        marker = RunMarker(env.get(RUN_ID_ENV, ""), time.time(), "", str(settings().run_root))
        proc = self._launch_forked(index, python, env, cwd, log_path, grace, role)  # zygotes.py
        if proc is None:
            proc = self._launch_cold(index, python, env, cwd, log_path, grace, role)
        proc.marker = marker  # a forked worker's /proc environment is the zygote's: NBWORKERS_SPARE=<run root>
        return proc

    def _launch_forked(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path,
                       grace: float, role: str) -> WorkerProcess | None:
        socket_path, note = zygotes().socket_for(python, env, cwd)
        if note:
            with open(log_path, "ab") as log:
                log.write(f"--- nbworkers: {note}\n".encode())
        if not socket_path:
            return None
        config = settings()
        return self._launch_cold(index, python, env, cwd, log_path, grace, role, [
            "--zygote", socket_path, "--zygote-timeout", str(config.zygote_fork_timeout),
            "--zygote-connect-timeout", str(config.zygote_connect_timeout)])

    def _launch_cold(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path,
                     grace: float, role: str, host_options: list[str] | None = None) -> WorkerProcess:
        command = host_command(python, ["--log", str(log_path), "--grace", str(grace), "--role", role,
                                        *(host_options or [])])
        host = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=open(log_path, "ab"),
            env=env, cwd=cwd, start_new_session=True, close_fds=True,
        )
        return WorkerProcess(index=index, host=host, log_path=log_path)
