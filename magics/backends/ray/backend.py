"""The Ray backend: ``%%worker --backend ray`` runs each worker on whichever Ray node a placement group puts it.

One Ray actor per worker (``nodes/host_actor.NbworkersWorkerHost``), all in one placement group (``--spread``:
STRICT_SPREAD, one worker per node; else PACK). ``plan()`` places the group and asks every actor for its
node's address, a free port there and the GPUs Ray gave it: that is each worker's ``TF_CONFIG`` entry.
``launch()`` makes the actor start the usual worker host on its node, so logs, relay messages, exit codes,
stop, kill and stack dumps behave as with the local backend. The kernel's relay listens on the address it tells
the workers (every interface only when this machine does not have it: ``address.bind_host``); CurveZMQ encrypts
it, and each node's key may speak only for its own worker.

When the worker's node does not see the kernel's files (no shared file system), the cell and the pushed
variables are copied to the node, the log is written there and copied back, a chunk every
``log_mirror_interval`` seconds, into the kernel's run directory (where ``%workers logs`` reads it).

Once a worker group is gone with every actor alive and idle, the group (its placement group and actors) goes
to the kernel's pool (``groups/pool.py``): the next run of the same shape takes it and starts its hosts through those
live actors at once (``RaySettings.pool_idle_timeout``; 0: every group is released, ``ray.kill`` of its actors,
then the placement group, as one whose actor died is). The actors belong to the kernel, the Ray driver: if the
kernel dies, even by ``kill -9``, Ray kills them, pooled or not, and each host, seeing its stdin close, stops its
worker.

Ray is imported only when this backend is used; the kernel stays free of TensorFlow.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nbworkers.magics.backends.ray.actors import (
    first_line,
    kill_actor,
    restore_sigterm,
    sigterm_handler,
)
from nbworkers.magics.backends.ray.address import (
    bind_host,
    connected_address,
    remember_connection,
    route_address,
    same_cluster,
)
from nbworkers.magics.backends.ray.capacity import placeable
from nbworkers.magics.backends.ray.checks import (  # noqa: F401 (RayBackendError, check_launch: this module's API too)
    INSTALL_HINT,
    RayBackendError,
    check_address,
    check_launch,
    import_ray,
    split_address,
)
from nbworkers.magics.backends.ray.groups.core import Shape
from nbworkers.magics.backends.ray.groups.place import Group, let_go, new_group, pooled_group
from nbworkers.magics.backends.ray.groups.pool import actor_pool
from nbworkers.magics.backends.ray.node_zygotes import Asked, node_zygotes
from nbworkers.magics.backends.ray.nodes import state_copy
from nbworkers.magics.backends.ray.nodes.host_actor import NbworkersWorkerHost, log_probe
from nbworkers.magics.backends.ray.nodes.tls import ray_tls_fact, say_once
from nbworkers.magics.backends.ray.options import RayOptions
from nbworkers.magics.backends.ray.ray_settings import RaySettings, ray_settings
from nbworkers.magics.backends.ray.worker import RayWorkerProcess
from nbworkers.magics.backends.zygotes import why_not_forked
from nbworkers.magics.frameworks import registry as frameworks
from nbworkers.magics.launch.environment import worker_env
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.rundir.layout import CELL_FILE, PUSH_FILE
from nbworkers.magics.settings import settings as current_settings
from nbworkers.magics.shapes import Placement, PlannedTask, RelayKeys
from nbworkers.protocol import cell_scan, wire
from nbworkers.protocol.cell_scan import CellScan

ACTOR_PROCESS_TITLE = "ray::" + NbworkersWorkerHost.__name__  # what the actors' processes are called on the nodes
# The worker's own variables (always sent); with ``forward_env_prefixes`` and --env, all a node receives of
# the kernel's environment. Everything else (PATH, HOME, the virtualenv, ...) is the node's own.
WORKER_VARIABLES = ("CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED")  # and the frameworks' (TF_CONFIG: magics/frameworks/)
_connect_lock = threading.Lock()  # ray.init once, from the first cell or the prewarm at %load_ext (groups/prewarm.py)


class RayBackend:
    """``%%worker --backend ray``. ``address``: the Ray cluster (HOST:PORT of the head node, ray://HOST:PORT,
    or auto: ``RAY_ADDRESS``, else the cluster started on this machine)."""

    name = "ray"
    worker_host = ""  # per worker: see plan()
    encrypt_relay = True  # the relay crosses machines: CurveZMQ, only the keys of this run's nodes (relay_curve.py)

    def __init__(self, address: str = "", cpus_per_worker: float | None = None, gpus_per_worker: int | None = None,
                 spread: bool = False, extra_env: dict[str, str] | None = None, cluster_name: str = "",
                 grace: float | None = None, settings: RaySettings | None = None):
        self.address = address or os.environ.get("RAY_ADDRESS", "") or "auto"
        self.cpus_per_worker = 1.0 if cpus_per_worker is None else float(cpus_per_worker)
        self.gpus_per_worker = gpus_per_worker or 0
        self.spread = spread
        self.extra_env = dict(extra_env or {})
        self.cluster_name = cluster_name
        self.grace = current_settings().stop_grace if grace is None else grace
        self.settings = settings or ray_settings()
        self._group: Group | None = None
        self._generation = 0
        self.placements: list[dict[str, Any]] = []  # where each worker of the current group runs (node facts)
        self.python = ""  # the workers' interpreter (--python; "" = each node's own)
        self.scan: CellScan | None = None  # the cell's scan: may its workers fork (from_spec)
        self.shared = frameworks.shared()  # the framework's variables every worker gets, read at import (from_spec)
        self._zygotes_asked: Asked | None = None  # the last launch's: nodes whose zygote starts at the run's end
        self._relay: RelayKeys | None = None  # the run's relay (attach_relay): allows the nodes' client keys
        self._shared_nodes: set[str] = set()  # Ray node ids that write the kernel's run directory themselves
        self.ray_tls = ""  # "on" or "off (why)": Ray's own transport (nodes/tls.py), known once the workers are placed
        if self.cpus_per_worker <= 0:
            raise RayBackendError(f"--cpus-per-worker {cpus_per_worker:g}: give a positive number, for example 1.")

    @classmethod
    def from_spec(cls, spec: LaunchSpec, options: RayOptions) -> "RayBackend":
        backend = cls(address=options.address, cpus_per_worker=options.cpus_per_worker,
                      gpus_per_worker=spec.gpus_per_worker, spread=options.spread, extra_env=spec.env,
                      cluster_name=spec.name)
        backend.python, backend.scan = spec.python, cell_scan.of_spec(spec)
        backend.shared = frameworks.shared(spec.framework, spec.framework_options)  # --framework jax: KERAS_BACKEND...
        return backend

    # ------------------------------------------------------------------ connection
    def connect(self):
        """Ray, connected to this backend's cluster (``ray.init`` once per kernel)."""
        ray = import_ray()
        with _connect_lock:
            return self._connected(ray)

    def _connected(self, ray):
        if ray.is_initialized():
            self._check_same_cluster(ray)
            return ray
        check_address(self.address, self.settings.connect_timeout)
        kernel_sigterm = sigterm_handler()
        try:
            ray.init(address=self.address, logging_level=logging.ERROR, log_to_driver=False,
                     namespace="nbworkers")

            remember_connection(self.address)
        except Exception as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            hint = ("Start one with `ray start --head`, or pass --address HOST:PORT of its head node."
                    if self.address == "auto" else "Check the address (`ray status --address ...`).")
            raise RayBackendError(f"could not connect to the Ray cluster at {self.address}: {first}. {hint}"
                                  " Nothing was started.") from None
        finally:
            restore_sigterm(kernel_sigterm)  # ray.init turns SIGTERM into SystemExit in the main thread
        return ray

    def _check_same_cluster(self, ray) -> None:
        """One Ray cluster per kernel: any spelling of the connected head is fine (``127.0.0.1:P``, ``localhost:P``,
        the host's IP, ``auto``, ``ray://``); another cluster is refused (ray_address.py)."""
        current = connected_address(ray)
        if current and not same_cluster(self.address, current):
            raise RayBackendError(
                f"--address {self.address}: this kernel is already connected to another Ray cluster, at {current}"
                " (one per kernel). Use that address (or auto), or restart the kernel to use another cluster."
            )

    def attach_relay(self, relay: RelayKeys) -> None:
        """The cluster's relay, to allow each placed actor's CurveZMQ client key (made on its node)."""
        self._relay = relay

    def relay_hosts(self) -> tuple[str, str | None]:
        """(bind, advertise) for the kernel's relay, command and data sockets: the address the nodes reach us at,
        bound on that address alone when this machine has it (``sockets.bind_host``; else every interface)."""
        ray = self.connect()
        if self.settings.relay_host:
            advertise = self.settings.relay_host
        elif self.address.startswith("ray://"):  # Ray Client: the kernel is no Ray node; the route to the head
            head = split_address(self.address)  # a ray:// address always has a host
            advertise = route_address(head[0] if head else "")
        else:
            advertise = ray.util.get_node_ip_address()
        return bind_host(advertise), advertise

    def isolation_fact(self) -> dict[str, str]:
        """What ``state.json`` and ``%workers`` say (``backends/isolation.py``): Ray workers use their nodes'
        networks; TensorFlow's servers there listen on every interface, unauthenticated (README, Security model); and
        ``ray_tls``, whether Ray's own transport is encrypted (nodes/tls.py), once the workers are placed."""
        fact = {"mode": "off", "reason": "Ray nodes: each worker's TensorFlow server listens on every interface of "
                                         "its node, unauthenticated; the relay is CurveZMQ"}
        return {**fact, "ray_tls": self.ray_tls} if self.ray_tls else fact

    # ------------------------------------------------------------------ placement
    def plan(self, tasks: Sequence[PlannedTask], gpus_per_worker: int | None = None) -> list[Placement]:
        """Place one actor per task; each worker's TensorFlow address (its node's IP, a port free there) and
        GPUs (those Ray assigned, or ``-1``). An idle group of the same shape in the kernel's pool is taken first."""
        ray = self.connect()
        self._release_group()
        gpus = self.gpus_per_worker if gpus_per_worker is None else (gpus_per_worker or 0)
        shape = Shape(len(tasks), self.cpus_per_worker, gpus, self.spread)
        group = (pooled_group(ray, shape, self.settings, self._ask_zygotes)
                 or new_group(ray, shape, self.settings, self._ask_zygotes))
        for index, w in enumerate(group.where):  # each node's key speaks for its own worker only (relay_curve.py)
            if self._relay is not None and w.get("relay_client_key"):
                self._relay.allow_client(w["relay_client_key"], index)
        self._group = group
        self._generation += 1
        self.placements = group.where
        self.ray_tls = ray_tls_fact(os.environ, group.where)  # the kernel's and every node's environment
        say_once(self.ray_tls)  # on, or plain text and what to do: once per kernel, in the cell (nodes/tls.py)
        return [Placement(host=w["ip"], port=w["port"], gpus=",".join(w["gpus"]) if gpus else "-1")
                for w in group.where]

    def capacity(self) -> int:
        """How many workers Ray could place now, this run's own group included (an elastic run's size): capacity.py."""
        ray = self.connect()
        held = [w.get("node_id", "") for w in (self._group.where if self._group else [])]
        held += actor_pool().held_nodes()  # idle groups of this kernel's pool give way to a new group
        return placeable(ray.nodes(), dict(ray.available_resources()), held, self.cpus_per_worker,
                         self.gpus_per_worker, self.spread)

    # ------------------------------------------------------------------ launch
    def launch(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path, grace: float,
               role: str = "worker") -> RayWorkerProcess:
        ray = import_ray()
        group = self._group
        if group is None or index >= len(group.actors):
            raise RayBackendError("internal error: launch() before plan() placed the workers")
        self.grace = grace
        run_dir = log_path.parent
        files = {}
        for name in (CELL_FILE, PUSH_FILE):
            if (run_dir / name).exists() and (name == CELL_FILE or env.get(wire.ENV_PUSH)):
                files[name] = (run_dir / name).read_bytes()
        python = "" if not python or python == sys.executable else python
        forwarded = self._worker_variables(env)
        if group.zygotes is None:  # the launch's first worker: every node's zygote (asked at placement)
            group.zygotes = node_zygotes().sockets_for(ray, [w["node_id"] for w in group.where], python, env,
                                                       forwarded, cwd, self.settings.actor_start_timeout,
                                                       group.zygotes_asked)
        zygote, note = group.zygotes[index]
        config = current_settings()
        generation = int(env.get(wire.ENV_GENERATION, "0") or 0)
        state, state_note = self._state_for(run_dir, generation, index, group.where[index].get("node_id", ""))
        request = {
            "index": index,
            "generation": generation,
            "role": role,
            "grace": grace,
            "python": python,
            "env": forwarded,
            "cwd": cwd,
            "run_dir": str(run_dir),
            # one per node (two Ray nodes on one machine, as the tests' simulated cluster, do not share it)
            "node_dir_name": (f"{self.cluster_name or run_dir.name}-{socket.gethostname()}-{os.getpid()}"
                              f"-{str(group.where[index].get('node_id') or 'node')[:12]}"),
            "log": str(log_path),
            "probe": log_probe(log_path),
            "files": files,
            "state": state,
            "state_max_bytes": self.settings.saved_state_max_bytes,
            "zygote": [zygote, config.zygote_fork_timeout, config.zygote_connect_timeout,
                       node_zygotes().pid_at(zygote)] if zygote else None,
        }
        actor = group.actors[index]
        try:
            started = ray.get(actor.start.remote(request), timeout=self.settings.call_timeout)
        except Exception as error:
            self._release_group()  # not to the pool: that actor may be broken
            raise RayBackendError(
                f"worker {index} could not be started on Ray node {group.where[index]['ip']}: {first_line(error)}"
            ) from None
        where = group.where[index]
        if started["shared"]:
            self._shared_nodes.add(where.get("node_id", ""))
        if started.get("cwd_refused"):  # said in the cell too: the worker's imports and relative paths moved
            print(f"nbworkers: worker {index}: {started['cwd_refused']}", file=sys.stderr, flush=True)
        with open(log_path, "ab") as log:
            for text in (note, state_note if not started["shared"] else ""):
                if text:
                    log.write(f"--- nbworkers: {text}\n".encode())
            log.write(
                f"--- nbworkers: on Ray node {where['ip']} ({where['hostname']}, node {where['node_id'][:12]}),"
                f" host pid {started['host_pid']}, python {started['python'] or where['python']}, log there:"
                f" {started['log']}{'' if started['shared'] else ' (copied here)'}\n".encode()
            )
        return RayWorkerProcess(self, index, actor, log_path, started, where, generation)

    def _state_for(self, run_dir: Path, generation: int, index: int, node_id: str) -> tuple[dict[str, bytes], str]:
        """The session save worker ``index`` of ``generation`` restores from, for a node that may not see the kernel's
        files (``state_copy.files_for``; none for a node that wrote the kernel's files before), and why not when it
        is too large."""
        if generation < 1 or node_id in self._shared_nodes:
            return {}, ""
        files, why = state_copy.files_for(run_dir, generation, index, self.settings.saved_state_max_bytes)
        if why:
            return {}, (f"the session's saved state was not sent to this node: {why}; worker {index} restores"
                        " nothing there")
        return files, ""

    def _ask_zygotes(self, ray: Any, node_ids: list[str] | None) -> Asked | None:
        """Every placed node's zygote, asked for before the workers' environments exist: what a launch forwards to
        the nodes but its per-run variables (the zygotes' key leaves them out; ``launch`` checks that it matches)."""
        if not current_settings().zygote or self.scan is None or why_not_forked("", "", self.scan) is not None:
            return None
        if node_ids is None:  # the launch asks then
            return None
        self._zygotes_asked = node_zygotes().ask(ray, node_ids, *self.zygote_request(), only_worth_it=True)
        return self._zygotes_asked

    def zygote_request(self) -> tuple[str, dict[str, str]]:
        """(interpreter, forwarded import-time environment) of the zygotes this backend's runs fork from: "" for
        each node's own interpreter, and the kernel's variables a launch forwards but its per-run ones."""
        python = "" if not self.python or self.python == sys.executable else self.python
        return python, self._worker_variables(worker_env(os.environ, self.extra_env, frameworks.blank(), "-1", {},
                                                         shared=self.shared))

    def close(self) -> None:
        """The run ended: the zygotes its nodes had none of start now, for the next launches there."""
        asked, self._zygotes_asked = self._zygotes_asked, None
        if asked is not None and asked.later:
            try:
                node_zygotes().prewarm(import_ray(), asked)
            except Exception:  # the cluster is going away: nothing to prepare
                pass

    def _worker_variables(self, env: dict[str, str]) -> dict[str, str]:
        """What of the worker's environment goes to its node: nbworkers' own variables, the framework's (per worker
        and shared: TF_CONFIG; NBWORKERS_FRAMEWORK, KERAS_BACKEND...), --env, and the kernel's variables with
        ``forward_env_prefixes``; the node supplies the rest."""
        prefixes = tuple(self.settings.forward_env_prefixes)
        own = frozenset(WORKER_VARIABLES) | frameworks.variables() | frozenset(self.shared)
        return {
            k: v for k, v in env.items()
            if k in own or k in self.extra_env or k.startswith(prefixes)
        }

    # ------------------------------------------------------------------ release
    def release_actor(self, proc: RayWorkerProcess) -> None:
        """The worker's host is gone: with the last one of its group, the group goes to the pool when every actor
        is alive and idle (``proc.reusable``), else its actors are killed and its placement group removed."""
        group = self._group
        if group is None or proc.actor not in group.actors:
            kill_actor(proc._ray, proc.actor)
            return
        group.reusable = group.reusable and proc.reusable
        group.open.discard(group.actors.index(proc.actor))
        if not group.open:
            self._release_group(to_pool=group.reusable)

    def _release_group(self, to_pool: bool = False) -> None:
        """The current group: to the pool (``to_pool``, its actors idle), or its actors killed (their hosts stop their
        workers) and its placement group removed."""
        group, self._group = self._group, None
        if group is None:
            return
        import ray

        let_go(ray, group, to_pool, self.settings)


# ---------------------------------------------------------------------------------------- helpers
