"""The local backend: each worker is a fresh interpreter under a host process (see ``host``), on this machine.

Every host runs in a session of its own (so the notebook's Interrupt button, which signals the kernel's
process group, never reaches it) and holds a pipe from the kernel on its stdin (so a dead kernel, even one
killed with ``kill -9``, takes its workers with it).

A worker is forked from the kernel's zygote for its interpreter and import-time environment (``zygotes``:
TensorFlow imported once; its host supervises it as any worker) unless zygotes are off or cannot serve it;
then it is spawned: a fresh interpreter that imports TensorFlow itself.

The workers of one run share a private network namespace (``isolation``; ``protocol/private/netns.py``) made at the
run's first launch and kept across its restarts: their TensorFlow servers are reachable by each other only. They
reach the kernel (relay, session commands) and the zygote over Unix sockets in private directories, which a
network namespace does not hide.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from nbworkers.host.command import host_command, tell_host
from nbworkers.magics.backends.isolation import RunNamespace, namespace_for_run
from nbworkers.magics.backends.registry import BackendKind, Flag
from nbworkers.magics.backends.zygotes import zygotes
from nbworkers.magics.launch.gpus import assign_gpus, visible_gpus
from nbworkers.magics.launch.ports import pick_free_ports
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.settings import settings
from nbworkers.magics.shapes import IsolationFact, Placement, PlannedTask, RelayKeys
from nbworkers.procs.kill import group_alive, kill_group, kill_groups
from nbworkers.procs.ownership import RUN_ID_ENV, RunMarker, boot_clock, record_of, started_since_boot
from nbworkers.protocol.private.files import open_own


@dataclass
class WorkerProcess:
    """One worker as the kernel sees it: its host process, and the worker's own pid once reported."""

    index: int
    host: subprocess.Popen
    log_path: Path
    worker_pid: int | None = None
    node_label: str = ""  # this machine: the worker's own host name
    extra_pgids: list[int] = field(default_factory=list)
    marker: RunMarker | None = None  # the run's marker and start (ownership.py); the records are added on use
    records: dict[int, float] = field(default_factory=dict)  # pid -> create time of what this kernel started

    def record_host(self) -> None:
        """Record the host's (pid, create time): it is this kernel's child, not reaped yet, so the pid is its."""
        record = record_of(psutil.Process(self.host.pid)) if self.host.poll() is None else None
        if record is not None:
            self.records[record[0]] = record[1]

    def note_worker(self, pid: int, zygote_pids: frozenset[int] = frozenset()) -> None:
        """The pid the host reported (``hello``): recorded with its create time when the process is the host's
        child (spawned) or a child of this kernel's zygotes (forked: the zygote's ``pid N`` reply), so that a pid
        reused since, or a pid that was never this worker's, is never recorded as ours."""
        self.worker_pid = pid
        try:
            parent, created = psutil.Process(pid).ppid(), started_since_boot(pid)
        except (psutil.Error, OSError, IndexError, ValueError):
            return
        if parent == self.host.pid or parent in zygote_pids:
            self.records[pid] = created

    def processes(self) -> list[tuple[int, float]]:
        """(pid, create time) of the processes this kernel started for this worker: the state file's record."""
        return sorted(self.records.items())

    def _marker(self) -> RunMarker | None:
        if self.marker is None:
            return None
        return replace(self.marker, recorded=frozenset(self.records.items()))

    def poll(self) -> int | None:
        """The worker's exit code (negative: killed by that signal), or None while it runs."""
        code = self.host.poll()
        if code is None:
            return None
        if code > 128:  # the host exits with 128+N when the worker died of signal N
            return -(code - 128)
        return code

    def _tell_host(self, command: str) -> None:
        tell_host(self.host.stdin, command)

    def request_stop(self) -> None:
        """Ask the host to stop the worker group (INT, TERM, grace, KILL: ``procs.kill.interrupt_group``);
        returns at once."""
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
        carrying the run's marker, recorded by this kernel or in a group whose leader is: a pid reused by another
        program, a bogus pid a worker reported, or this kernel's zygote, is never signalled)."""
        marker = self._marker()
        if marker is None:  # built without a launch (tests): only our own child host, not yet reaped
            if self.host.poll() is None:
                kill_group(self.host.pid)  # SIGKILL
            return
        kill_groups(self.pgids(), marker)  # procs/kill.py

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
    encrypt_relay = False  # the relay is an ipc socket in the kernel's private directory: no other user reaches it

    def __init__(self, isolation: str = "") -> None:
        self.isolation = isolation  # auto | required | off; "": settings().isolation
        self._namespace: RunNamespace | None = None
        self._namespace_checked = False
        # the last launch's isolation (kept after close(): the ended run's state.json still says it)
        self._isolation: IsolationFact = {"mode": "off", "reason": "not launched yet"}

    def relay_hosts(self) -> tuple[str, str | None]:
        """(bind, advertise) of the kernel's relay and command socket: ``ipc`` — a Unix socket in the kernel's
        private runtime directory (``magics/run/sockets.py``): no TCP port, no other user can connect."""
        return "ipc", None

    def attach_relay(self, relay: RelayKeys) -> None:
        """Nothing to allow: only this user's processes reach the relay's ipc socket."""

    def capacity(self) -> int:
        """As many as asked: this machine's processes (elastic runs, --min-workers, are not its: ``LOCAL``)."""
        return sys.maxsize

    @property
    def isolated(self) -> bool:
        """Do this run's workers share a private network namespace?"""
        return self._namespace is not None

    def isolation_fact(self) -> IsolationFact:
        """``{"mode": "namespace"}``, or ``off`` and why (``state.json``'s ``isolation``, ``%workers``)."""
        return dict(self._isolation)

    def plan(self, tasks: Sequence[PlannedTask], gpus_per_worker: int | None) -> list[Placement]:
        """Every worker on this machine: ports free here, an equal share of the visible GPUs (or as asked).
        The first plan of a run also makes its private network namespace (``isolation``)."""
        if self._namespace is not None and not self._namespace.alive():  # its holder was killed: a new one
            self._namespace.close()
            self._namespace, self._namespace_checked = None, False
        if not self._namespace_checked:
            config = settings()
            wanted = self.isolation or config.isolation
            if wanted == "auto" and self._isolation["mode"] == "namespace":
                wanted = "required"  # a restart keeps the run's isolation, or fails saying why
            self._namespace, why = namespace_for_run(wanted, config.isolation_start_timeout)
            self._isolation = {"mode": "namespace"} if self._namespace is not None else {"mode": "off", "reason": why}
            self._namespace_checked = True

        gpu_lists = assign_gpus(len(tasks), gpus_per_worker, visible_gpus())
        return [Placement(self.worker_host, port, gpus) for port, gpus in zip(pick_free_ports(len(tasks)), gpu_lists)]

    def launch(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path,
               grace: float, role: str = "worker") -> WorkerProcess:
        marker = RunMarker(env.get(RUN_ID_ENV, ""), time.time(), "", started_boot=boot_clock())
        if self._namespace is not None:
            env = {**env, **self._namespace.env()}
        proc = self._launch_forked(index, python, env, cwd, log_path, grace, role)  # zygotes.py
        if proc is None:
            proc = self._launch_cold(index, python, env, cwd, log_path, grace, role)
        proc.marker = marker
        proc.record_host()
        return proc

    def close(self) -> None:
        """The run ended: its namespace holder goes (the namespace itself with its last worker). A Restart of the
        ended run plans again and gets a new namespace (the old holder may still be exiting: never joined)."""
        if self._namespace is not None:
            self._namespace.close()
        self._namespace, self._namespace_checked = None, False

    def _launch_forked(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path,
                       grace: float, role: str) -> WorkerProcess | None:
        socket_path, note = zygotes().socket_for(python, env, cwd)
        if note:
            with os.fdopen(open_own(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as log:
                log.write(f"--- nbworkers: {note}\n".encode())
        if not socket_path:
            return None
        config = settings()
        zygote_pid = zygotes().pid_at(socket_path)
        return self._launch_cold(index, python, env, cwd, log_path, grace, role, [
            "--zygote", socket_path, *(["--zygote-pid", str(zygote_pid)] if zygote_pid else []),
            "--zygote-timeout", str(config.zygote_fork_timeout),
            "--zygote-connect-timeout", str(config.zygote_connect_timeout)])

    def _launch_cold(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path,
                     grace: float, role: str, host_options: list[str] | None = None) -> WorkerProcess:
        command = host_command(python, ["--log", str(log_path), "--grace", str(grace), "--role", role,
                                        *(host_options or [])])
        with os.fdopen(open_own(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as log:
            host = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log, env=env,
                                    cwd=cwd, start_new_session=True, close_fds=True)
        return WorkerProcess(index=index, host=host, log_path=log_path)


@dataclass(frozen=True)
class LocalOptions:
    """``--backend local``'s options (its flags)."""

    isolation: str | None = None  # auto | required | off (--isolation); None: settings().isolation


def _create(spec: LaunchSpec, options: LocalOptions) -> LocalBackend:
    return LocalBackend(isolation=options.isolation or "")


ISOLATION = Flag("--isolation", {
    "choices": ("auto", "required", "off"), "default": None,
    "help": "local: the workers in a private network namespace of the run's own ('auto': when this machine allows "
            "it; 'off': with the machine's network, e.g. to download data; default: the setting `isolation`)"},
    elsewhere="--isolation: only for the local backend (a Ray run's workers talk across machines: the cluster's "
              "network protects them, see the README's Security model). Leave it out.")

# The registration (pyproject.toml, entry point group nbworkers.backends): this machine's processes.
LOCAL: BackendKind[LocalOptions] = BackendKind(
    name="local", title="local", summary="local processes (default)", options=LocalOptions, create=_create,
    flags=(ISOLATION,), can_detach=True, runs_here=True)
