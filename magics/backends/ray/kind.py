"""The Ray backend's registration (pyproject.toml, entry point group ``nbworkers.backends``): its flags, its options,
its checks before a launch, its prewarm and what it lets go. Imports no Ray and not the backend's code
(``backend.py``): only a ``--backend ray`` launch loads them.
"""

from __future__ import annotations

import os

from nbworkers.magics.backends.ray.options import RayOptions
from nbworkers.magics.backends.registry import BackendKind, Flag
from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.shapes import Backend

FLAGS = (
    Flag("--address", {"default": "", "metavar": "HOST:PORT",
                       "help": "ray: the Ray cluster's head (default: RAY_ADDRESS, else the cluster started on this "
                               "machine)"}),
    Flag("--cpus-per-worker", {"type": float, "default": None, "metavar": "C",
                               "help": "ray: CPUs reserved per worker (default 1)"}),
    Flag("--spread", {"action": "store_true", "help": "ray, slurm: at most one worker per node"}),
)


def check(options: RayOptions) -> None:
    """Ray must import and its address answer; nothing starts otherwise."""
    cpus = options.cpus_per_worker
    if cpus is not None and cpus <= 0:
        raise LaunchError(f"--cpus-per-worker {cpus:g}: give a positive number of CPUs, for example 1 or 0.5.")
    from nbworkers.magics.backends.ray.checks import check_launch  # lazily: only --backend ray loads its code

    check_launch(options.address)


def create(spec: LaunchSpec, options: RayOptions) -> Backend:
    from nbworkers.magics.backends.ray.backend import RayBackend  # lazily: only --backend ray loads its code

    return RayBackend.from_spec(spec, options)


def prewarm() -> None:
    """With ``RAY_ADDRESS`` set, each Ray node's zygote and a spare worker host start now (groups/prewarm.py)."""
    address = os.environ.get("RAY_ADDRESS", "")
    if address:
        from nbworkers.magics.backends.ray.groups.prewarm import prewarm_nodes  # imports no Ray

        prewarm_nodes(address)


def release_idle() -> int:
    """The idle worker groups kept for warm runs (groups/pool.py), if this kernel ever used Ray."""
    from nbworkers.magics.backends.ray.groups.pool import drain_if_used  # imports no Ray

    return drain_if_used()


RAY: BackendKind[RayOptions] = BackendKind(
    name="ray", title="Ray", summary="a Ray cluster (pip install nbworkers[ray])", options=RayOptions,
    create=create, check=check, flags=FLAGS, can_detach=True, elastic=True, runs_here=False, prewarm=prewarm,
    release_idle=release_idle)
