"""Spare worker hosts: one idle worker-host actor per node, made ahead, so that a cold run (a new placement group)
does not wait for a new actor process per worker (Ray starts a Python process that imports ``ray``: ~2 s of CPU
each on this project's machine), which a hand launch does not pay.

With ``RAY_ADDRESS`` set, ``%load_ext`` makes one on every node with CPUs, beside that node's zygote
(``prewarm.py``), for the kernel's first run. They are not made again when a run took them: that run's group stays
in the pool for the next run of its shape (a warm run), and new spares' processes would start just as that warm run
does and slow it (measured: 5.3 s instead of 1.9 s to its first step).

A spare is an actor of the worker-host class pinned to its node, outside any placement group, holding no resources
(``num_cpus=0``): the run's placement group still holds the worker's CPUs, and the spare hosts the worker in its
bundle's stead. It lives in the kernel's pool (``pool.py``, the shape ``core.SPARE``): released after
``RaySettings.pool_idle_timeout``, at ``%workers stop --all`` and with the kernel (it belongs to the kernel, the Ray
driver: its ``kill -9`` ends it too).

Only runs whose hosts a spare can stand in for exactly take them: no GPUs (Ray gives GPUs to the actor that asks
for them) and less than two CPUs per worker (Ray sets the actor's ``OMP_NUM_THREADS`` from its CPUs, 1 for a
spare, and the host passes its environment on to the worker).
"""

from __future__ import annotations

from typing import Any

from nbworkers.magics.backends.ray.actors import actor_class
from nbworkers.magics.backends.ray.groups.core import SPARE, Shape
from nbworkers.magics.backends.ray.groups.pool import PooledGroup, actor_pool
from nbworkers.magics.backends.ray.ray_settings import RaySettings


def can_stand_in(shape: Shape) -> bool:
    """Can a spare host the workers of ``shape`` as an actor of its bundle would?"""
    return shape.gpus == 0 and shape.cpus < 2


def make_spares(ray: Any, node_ids: list[str], settings: RaySettings) -> int:
    """One spare on each of ``node_ids`` that has none (without waiting for them to start); how many were made.
    Nothing with the pool off."""
    if settings.pool_idle_timeout <= 0:
        return 0
    made = 0
    for node_id in dict.fromkeys(node_ids):
        if actor_pool().count_at(SPARE, node_id):
            continue
        actor = _new_spare(ray, node_id)
        actor_pool().give_back(ray, SPARE, PooledGroup(None, [actor]), (node_id,), settings.pool_idle_timeout,
                               settings.pool_check_interval)
        made += 1
    return made


def take_spares(node_ids: list[str]) -> list[Any | None]:
    """For each bundle's node, a spare there (each taken once), or None: that bundle gets an actor of its own."""
    taken = [actor_pool().take_at(SPARE, node_id) for node_id in node_ids]
    return [group.actors[0] if group is not None else None for group in taken]


def _new_spare(ray: Any, node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return actor_class(ray).options(
        num_cpus=0,  # no runtime_env: its process starts without setup_worker.py (nodes/host_actor.py's docstring)
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    ).remote()
