"""A worker group's start: its state before the first launch, and each launch (each worker's address, GPUs,
``TF_CONFIG`` and environment).

``Cluster`` (magics/run/cluster.py) calls ``initial_state`` once per run and ``launch_group`` for the first launch
and every restart (a new generation on fresh ports); ``backend_for`` picks the backend a cell asked for.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nbworkers.magics.backends import registry
from nbworkers.magics.frameworks import registry as frameworks
from nbworkers.magics.launch import roles
from nbworkers.magics.launch.environment import worker_env
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.launch.tfconfig import Task
from nbworkers.magics.run.core.state import ClusterState, WorkerState
from nbworkers.magics.run.noise import LEVEL_NAME, launch_line
from nbworkers.magics.run.relay import RelayReceiver
from nbworkers.magics.rundir import layout as rundir
from nbworkers.magics.rundir.layout import log_path
from nbworkers.magics.shapes import Backend, WorkerHandle
from nbworkers.procs.ownership import RUN_ID_ENV
from nbworkers.protocol import cell_scan, env_settings, wire
from nbworkers.protocol.private.files import open_own


def initial_state(name: str, backend_name: str, run_dir: Path, tasks: list[Task], settings: Any) -> ClusterState:
    """The state of a run before its first launch: one ``WorkerState`` per task."""
    cell_id, notebook = _notebook_cell()
    return ClusterState(
        name=name,
        backend=backend_name,
        run_dir=str(run_dir),
        workers=[new_worker_state(run_dir, settings, i, t) for i, t in enumerate(tasks)],
        kernel_pid=os.getpid(),
        kernel_id=_kernel_id(),
        cell_id=cell_id,
        notebook=notebook,
    )


def new_worker_state(run_dir: Path, settings: Any, index: int, task: Task | None = None) -> WorkerState:
    """A worker's state before its first launch (``task`` None: a plain worker, as an elastic group adds)."""
    worker = WorkerState(index=index, role=task.role if task else "worker", role_index=task.index if task else index,
                         log_path=str(log_path(run_dir, index)))
    worker.log_tail = type(worker.log_tail)(settings.log_tail_lines, settings.max_line_chars)
    return worker


def launch_group(procs: list[WorkerHandle], *, backend: Backend, spec: LaunchSpec, settings: Any, tasks: list[Task],
                 run_dir: Path, generation: int, relay: RelayReceiver, key: str, run_id: str,
                 extra_env: dict[str, str]) -> None:
    """Launch every task of ``spec`` into ``procs`` (filled one by one: after a launch that raised halfway,
    ``procs`` holds the processes to kill). ``extra_env``: more environment for every worker (sessions)."""
    # each worker's TensorFlow address (its machine's, a port free there) and GPUs, chosen by the backend
    placements = backend.plan(tasks, spec.gpus_per_worker)
    gpu_lists = [p.gpus for p in placements]
    hosts, ports = [p.host for p in placements], [p.port for p in placements]
    framework = frameworks.get(spec.framework)  # what joins the group: TF_CONFIG (magics/frameworks/)
    shared = frameworks.shared(spec.framework, spec.framework_options)  # NBWORKERS_FRAMEWORK, KERAS_BACKEND...
    gpu_counts = ",".join("0" if g == "-1" else str(len(g.split(","))) for g in gpu_lists)
    for i, task in enumerate(tasks):
        variables = framework.environment(tasks, hosts, ports, i)
        env = worker_env(
            base=os.environ, extra=spec.env, variables=variables, cuda_visible_devices=gpu_lists[i], shared=shared,
            wire_env={
                wire.ENV_RELAY: relay.address,
                wire.ENV_KEY: key,
                wire.ENV_CLUSTER: spec.name,
                wire.ENV_WORKER: str(i),
                wire.ENV_GENERATION: str(generation),
                wire.ENV_RUN_DIR: str(run_dir),
                wire.ENV_CODE: str(rundir.cell_path(run_dir)),
                wire.ENV_PUSH: str(rundir.push_path(run_dir)) if spec.push else "",
                wire.ENV_CWD: spec.cwd,
                wire.ENV_CELL_SCAN: cell_scan.of_spec(spec).to_env(),  # protocol/cell_scan.py
                RUN_ID_ENV: run_id,
                env_settings.MAX_LINE_CHARS.name: str(settings.max_line_chars),  # the hosts cut lines too
                wire.ENV_RELAY_SERVERKEY: relay.server_public_key,  # "" (left out) unless encrypted
                env_settings.GPU_COUNTS.name: gpu_counts,
                **roles.task_env(task),
                **extra_env,  # a session's command socket (magics/sessions/session.py)
            },
        )
        path = log_path(run_dir, i)
        with os.fdopen(open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as log:
            log.write(launch_line(task.role, task.index, generation, env.get(LEVEL_NAME, ""),
                                  variables.get(framework.shown, ""), framework.shown).encode())
        procs.append(backend.launch(i, spec.python, env, spec.cwd, path, settings.stop_grace, task.role))


def backend_for(spec: LaunchSpec) -> Backend:
    """The backend a launch asked for (``--backend``), made by its registration (magics/backends/registry.py)."""
    return registry.backend_for(spec)


def _notebook_cell() -> tuple[str, str]:
    """(cell id, notebook path) of the notebook cell running now: the id JupyterLab and Notebook 7 send in the
    execute request's metadata (``cellId``), and the notebook's path as Jupyter's server gave it to the kernel at
    its start (``JPY_SESSION_NAME``). The sidebar runs that cell again after a kernel restart stopped the run.
    Empty strings outside a notebook."""
    try:
        from IPython import get_ipython

        parent = getattr(get_ipython(), "parent_header", None) or {}
    except Exception:
        parent = {}
    metadata = parent.get("metadata") if isinstance(parent, dict) else None
    cell_id = metadata.get("cellId") if isinstance(metadata, dict) else None
    return cell_id if isinstance(cell_id, str) else "", os.environ.get("JPY_SESSION_NAME", "")


def _kernel_id() -> str:
    """The kernel's id, from its connection file name (kernel-<id>.json), when running in a Jupyter kernel."""
    try:
        from ipykernel.connect import get_connection_file

        name = Path(get_connection_file()).name
    except Exception:
        return ""
    return name[len("kernel-") : -len(".json")] if name.startswith("kernel-") else name
