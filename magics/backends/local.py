"""The local backend: each worker is a fresh interpreter under a host process (see ``host``), on this machine.

Every host runs in a session of its own (so the notebook's Interrupt button, which signals the kernel's
process group, never reaches it) and holds a pipe from the kernel on its stdin (so a dead kernel, even one
killed with ``kill -9``, takes its workers with it).

A worker is forked from the kernel's zygote for its interpreter and import-time environment (``zygotes``:
TensorFlow imported once; its host supervises it as any worker) unless zygotes are off or cannot serve it;
then it is spawned: a fresh interpreter that imports TensorFlow itself.

The workers of one run share a private network namespace (``isolation``; ``protocol/netns.py``) made at the
run's first launch and kept across its restarts: their TensorFlow servers are reachable by each other only. They
reach the kernel (relay, session commands) and the zygote over Unix sockets in private directories, which a
network namespace does not hide.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbworkers.host.command import host_command
from nbworkers.magics.backends.isolation import RunNamespace, namespace_for_run
from nbworkers.procs.kill import group_alive, kill_group, kill_groups
from nbworkers.procs.ownership import RUN_ID_ENV, RunMarker


@dataclass(frozen=True)
class Placement:
    """Where a backend put one worker: the address its peers reach its TensorFlow server at (its TF_CONFIG
    entry, ``host:port``) and the GPUs it sees (its ``CUDA_VISIBLE_DEVICES``; ``-1``: none)."""

    host: str
    port: int
    gpus: str


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

    def __init__(self, isolation: str = "") -> None:
        self.isolation = isolation  # auto | required | off; "": settings().isolation
        self._namespace: RunNamespace | None = None
        self._namespace_checked = False

    def relay_hosts(self) -> tuple[str, str | None]:
        """(bind, advertise) of the kernel's relay and command socket: ``ipc`` — a Unix socket in the kernel's
        private runtime directory (``magics/run/sockets.py``): no TCP port, no other user can connect."""
        return "ipc", None

    @property
    def isolated(self) -> bool:
        """Do this run's workers share a private network namespace?"""
        return self._namespace is not None

    def plan(self, tasks: list, gpus_per_worker: int | None) -> list[Placement]:
        """Every worker on this machine: ports free here, an equal share of the visible GPUs (or as asked).
        The first plan of a run also makes its private network namespace (``isolation``)."""
        from nbworkers.magics.launch.gpus import assign_gpus, visible_gpus
        from nbworkers.magics.launch.ports import pick_free_ports
        from nbworkers.magics.settings import settings

        if self._namespace is not None and not self._namespace.alive():  # its holder was killed: a new one
            self._namespace.close()
            self._namespace, self._namespace_checked = None, False
        if not self._namespace_checked:
            config = settings()
            self._namespace = namespace_for_run(self.isolation or config.isolation, config.isolation_start_timeout)
            self._namespace_checked = True

        gpu_lists = assign_gpus(len(tasks), gpus_per_worker, visible_gpus())
        return [Placement(self.worker_host, port, gpus) for port, gpus in zip(pick_free_ports(len(tasks)), gpu_lists)]

    def launch(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path,
               grace: float, role: str = "worker") -> WorkerProcess:
        from nbworkers.magics.settings import settings

        marker = RunMarker(env.get(RUN_ID_ENV, ""), time.time(), "", str(settings().run_root))
        if self._namespace is not None:
            env = {**env, **self._namespace.env()}
        proc = self._launch_forked(index, python, env, cwd, log_path, grace, role)  # zygotes.py
        if proc is None:
            proc = self._launch_cold(index, python, env, cwd, log_path, grace, role)
        proc.marker = marker  # a forked worker's /proc environment is the zygote's: NBWORKERS_SPARE=<run root>
        return proc

    def close(self) -> None:
        """The run ended: its namespace holder goes (the namespace itself with its last worker)."""
        if self._namespace is not None:
            self._namespace.close()

    def _launch_forked(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path,
                       grace: float, role: str) -> WorkerProcess | None:
        from nbworkers.magics.backends.zygotes import zygotes
        from nbworkers.magics.settings import settings

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
