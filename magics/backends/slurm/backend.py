"""The Slurm backend: ``%%worker --backend slurm`` runs each worker as a job step of the kernel's allocation.

``plan()`` places the workers on the allocation's nodes (in turn; ``--spread``: one per node; ``--tasks-per-node``),
picks each one's port on its node (one short step: ``allocation.free_ports``) and gives its TensorFlow address as
the node's ``NodeAddr``; the framework composes each worker's environment from those (TF_CONFIG:
``magics/frameworks``). ``launch()`` starts one step per worker (``commands.srun_command``) whose one task is
nbworkers' worker host (``host/worker_host.py``), which starts the worker: logs, relay messages, exit codes, stop
and stack dumps behave as with the local backend (``worker.py``). The workers reach the kernel's relay over TCP,
CurveZMQ-encrypted, each with a client key of its own that speaks only for its worker.

What it needs from the site: the kernel on a machine with Slurm's commands, inside the allocation (or ``--submit``);
the kernel's interpreter and the run directory at the same paths on the nodes (a shared file system, as home
directories are); the nodes able to reach the kernel's machine over TCP (``SlurmSettings.relay_host``).
Each worker's relay key pair is made in the kernel and reaches its node in the step's environment, through Slurm's
own (munge-authenticated, not encrypted) transport, as the run's HMAC key does.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from nbworkers.host.command import host_command
from nbworkers.magics.backends.ray.address import bind_host, route_address
from nbworkers.magics.backends.slurm import commands
from nbworkers.magics.backends.slurm.allocation import Allocation, SlurmError, cancel
from nbworkers.magics.backends.slurm.options import SlurmOptions
from nbworkers.magics.backends.slurm.settings import SlurmSettings, slurm_settings
from nbworkers.magics.backends.slurm.submit import Heartbeat, submit
from nbworkers.magics.backends.slurm.worker import SlurmWorker
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.rundir.layout import run_root
from nbworkers.magics.shapes import IsolationFact, Placement, PlannedTask, RelayKeys
from nbworkers.procs.ownership import RUN_ID_ENV
from nbworkers.protocol import wire
from nbworkers.protocol.private.files import open_own
from nbworkers.protocol.relay_curve import client_keypair

LOOPBACK = "127.0.0.1"


class SlurmBackend:
    name = "slurm"
    encrypt_relay = True  # the relay crosses machines: CurveZMQ, one client key per worker

    def __init__(self, options: SlurmOptions, gpus_per_worker: int | None = None,
                 settings: SlurmSettings | None = None, allocation: Allocation | None = None, run_name: str = "",
                 workers: int = 1):
        self.options = options
        self.run_name = run_name or "run"
        self.workers = workers  # --submit: the tasks the allocation is asked for
        self.gpus_per_worker = gpus_per_worker
        self.settings = settings or slurm_settings()
        self._allocation = allocation
        self._relay: RelayKeys | None = None
        self._placed: list[str] = []  # the node of each worker of the current launch
        self._forks = False  # this launch asked for its nodes' zygote steps (``_zygote_options``)
        self._fork_note = ""  # why this launch's workers are spawned, not forked ("" when they fork)
        self._heartbeat: Heartbeat | None = None  # --submit: the allocation this run asked for lives while it beats

    @classmethod
    def from_spec(cls, spec: LaunchSpec, options: SlurmOptions) -> "SlurmBackend":
        tasks = spec.workers + int(spec.chief) + spec.ps + spec.evaluator
        return cls(options, gpus_per_worker=spec.gpus_per_worker, run_name=spec.name, workers=tasks)

    def allocation(self) -> Allocation:
        """The allocation the workers go into: the kernel's (read once per run), or with --submit a new one, once
        Slurm starts it (the cell says it is queued, and why, meanwhile: ``submit.py``)."""
        if self._allocation is None:
            if self.options.submit:
                beat_file = f".slurm-{self.run_name}-{os.getpid()}-{secrets.token_hex(4)}.alive"  # one per allocation
                self._heartbeat = Heartbeat(run_root() / beat_file,
                                            self.settings.heartbeat_timeout / 10)
                self._allocation = submit(self.options, self.workers, self.run_name, self._gpus(None),
                                          self._heartbeat, self.settings)
            else:
                self._allocation = Allocation.current(self.settings.command_timeout)
        return self._allocation

    # ------------------------------------------------------------------ the relay
    def relay_hosts(self) -> tuple[str, str | None]:
        """(bind, advertise) of the kernel's relay: the address the nodes reach this machine at."""
        advertise = self.settings.relay_host
        if not advertise:
            addrs = [self.allocation().addrs[node] for node in self.allocation().nodes]
            advertise = LOOPBACK if commands.all_loopback(addrs) else route_address(addrs[0])
        return bind_host(advertise), advertise

    def attach_relay(self, relay: RelayKeys) -> None:
        self._relay = relay

    def capacity(self) -> int:
        nodes = len(self.allocation().nodes)
        if self.options.spread:
            return nodes
        return nodes * self.options.tasks_per_node if self.options.tasks_per_node else sys.maxsize

    def isolation_fact(self) -> IsolationFact:
        return {"mode": "off", "reason": "Slurm nodes: each worker's TensorFlow server listens on every interface of "
                                         "its node, unauthenticated; the relay is CurveZMQ"}

    # ------------------------------------------------------------------ placement
    def plan(self, tasks: Sequence[PlannedTask], gpus_per_worker: int | None) -> list[Placement]:
        """Each worker's node, its port there (picked on that node) and its GPUs (``--gpus-per-worker N``: N of its
        own, given by Slurm: ``--gpus-per-task``; else none)."""
        allocation = self.allocation()
        try:
            placed = commands.place(allocation.nodes, len(tasks), self.options.spread, self.options.tasks_per_node)
        except ValueError as error:
            raise SlurmError(str(error)) from None
        ports = allocation.free_ports(commands.counts_of(placed), self.settings.probe_timeout)
        self._placed, self._forks = placed, False
        per = self._gpus(gpus_per_worker)
        gpus = ",".join(str(i) for i in range(per)) if per else "-1"  # Slurm sets the real ones in the step
        taken: dict[str, int] = {}
        placements = []
        for node in placed:
            nth = taken.get(node, 0)
            taken[node] = nth + 1
            placements.append(Placement(allocation.addrs[node], ports[node][nth], gpus))
        return placements

    def _gpus(self, gpus_per_worker: int | None) -> int:
        return (self.gpus_per_worker if gpus_per_worker is None else gpus_per_worker) or 0

    # ------------------------------------------------------------------ launch
    def launch(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path, grace: float,
               role: str = "worker") -> SlurmWorker:
        if index >= len(self._placed):
            raise SlurmError("internal error: launch() before plan() placed the workers")
        allocation, node = self.allocation(), self._placed[index]
        env = dict(env)
        if env.get(wire.ENV_RELAY_SERVERKEY) and self._relay is not None:
            public, secret = client_keypair()
            self._relay.allow_client(public, index)  # this key speaks for worker ``index`` only (relay_curve.py)
            env[wire.ENV_RELAY_CLIENTKEY], env[wire.ENV_RELAY_CLIENTSECRET] = public, secret
        name = commands.step_name(env.get(RUN_ID_ENV, ""), env.get(wire.ENV_GENERATION, "0"), index)
        fork, note = self._zygote_options(index, python or sys.executable, env, cwd)
        host = host_command(python or sys.executable,
                            ["--log", str(log_path), "--grace", str(grace), "--role", role, *fork])
        command = commands.srun_command(allocation.job_id, node, name, host, self._gpus(None))
        with os.fdopen(open_own(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as log:
            log.write(f"--- nbworkers: Slurm job {allocation.job_id}, node {node} ({allocation.addrs[node]}), step "
                      f"{name}\n".encode())
            if note:
                log.write(f"--- nbworkers: {note}\n".encode())
            log.flush()
            srun = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log,
                                    env=commands.step_env(env), cwd=cwd or None, start_new_session=True,
                                    close_fds=True)
        beat = self._heartbeat.beat if self._heartbeat is not None else (lambda: None)
        return SlurmWorker(index, srun, log_path, node, name, allocation, self.settings.command_timeout, beat)

    def _zygote_options(self, index: int, python: str, env: dict[str, str], cwd: str) -> tuple[list[str], str]:
        """The host's ``--zygote`` options when the worker's node has a zygote step to fork it (``zygote_steps.py``:
        the first worker of a launch starts those of every node the launch uses, at once), else ([], why not)."""
        from nbworkers.magics.backends.slurm.zygote_steps import zygote_steps
        from nbworkers.magics.settings import settings

        allocation, node, timeout = self.allocation(), self._placed[index], self.settings.zygote_start_timeout
        if self._gpus(None):  # a forked worker lives in its zygote's step, outside the GPUs Slurm gave its own step
            return [], "spawned, not forked: --gpus-per-worker (each worker's step holds its own GPUs)"
        if index == 0 or not self._forks:
            self._fork_note = zygote_steps().ensure(allocation, self._placed, python, env, cwd)
            self._forks = True
        if self._fork_note:
            return [], self._fork_note if index == 0 else ""
        socket, pid, note = zygote_steps().socket_for(allocation, node, python, env, timeout)
        if not socket:
            return [], note
        config = settings()
        return ["--zygote", socket, "--zygote-pid", str(pid), "--zygote-timeout", str(config.zygote_fork_timeout),
                "--zygote-connect-timeout", str(config.zygote_connect_timeout)], ""

    def close(self) -> None:
        """The run ended: its steps are gone with their workers. The kernel's allocation stays; one --submit asked
        for is cancelled (a Restart of the ended run asks again)."""
        if self._heartbeat is not None and self._allocation is not None:
            cancel(self._allocation.job_id, self.settings.command_timeout)
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat, self._allocation = None, None
