"""A Ray run's worker group: a placement group and one worker-host actor per bundle (``RayBackend.plan``), taken
from the kernel's pool of idle groups (``pool.py``: a warm run) or placed anew, and let go at the run's end (to the
pool, or released).

A new group is submitted at once, the placement group and every actor together (the actors wait for their
bundles), or, when spare hosts are idle (``spares.py``), the placement group first and then a spare on each
bundle's node instead of a new actor; the nodes' zygotes are asked for as soon as Ray placed it, beside the actors'
start. A pooled group's actors are asked again where they are (a fresh port each, the node's relay key): one round
trip, no new process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nbworkers.magics.backends.ray.actors import actor_class, actor_failure
from nbworkers.magics.backends.ray.checks import RayBackendError
from nbworkers.magics.backends.ray.groups.core import Shape
from nbworkers.magics.backends.ray.groups.pool import PooledGroup, actor_pool
from nbworkers.magics.backends.ray.groups.spares import can_stand_in, take_spares
from nbworkers.magics.backends.ray.node_zygotes import Asked
from nbworkers.magics.backends.ray.ray_settings import RaySettings

AskZygotes = Callable[[Any, "list[str] | None"], "Asked | None"]  # (ray, node of each bundle) -> the zygotes asked


@dataclass
class Group:
    """One placement group and its actors: one launch generation of a cluster's workers."""

    placement_group: Any
    actors: list[Any]
    where: list[dict[str, Any]]
    open: set[int] = field(default_factory=set)
    zygotes: list[tuple[str | None, str]] | None = None  # per worker: its node's zygote socket, or why not
    zygotes_asked: Asked | None = None  # the nodes' zygotes asked for as soon as Ray placed the group
    shape: Shape | None = None  # what it was placed for: its key in the pool
    reusable: bool = True  # every actor closed alive with its host reaped: the group may go to the pool


def pooled_group(ray: Any, shape: Shape, settings: RaySettings, ask_zygotes: AskZygotes) -> Group | None:
    """An idle group of ``shape`` from the pool, its actors asked again where they are: a warm run. None when
    pooling is off, none is idle, or one of its actors does not answer (that group is released)."""
    if settings.pool_idle_timeout <= 0:
        return None
    taken = actor_pool().take(ray, shape)
    if taken is None:
        return None
    pooled, node_ids = taken
    asked = ask_zygotes(ray, list(node_ids))  # they were started for the group's last run: answered at once
    try:
        where = ray.get([a.where.remote() for a in pooled.actors], timeout=settings.call_timeout)
    except Exception:  # an actor or its node died meanwhile: a fresh group
        actor_pool().release(ray, pooled)
        return None
    return Group(pooled.placement_group, pooled.actors, where, open=set(range(shape.workers)), zygotes_asked=asked,
                 shape=shape)


def new_group(ray: Any, shape: Shape, settings: RaySettings, ask_zygotes: AskZygotes) -> Group:
    """Place a new group of ``shape`` and start its actors, or let spare hosts stand in for them (``spares.py``:
    then the group is placed first, to know its nodes); ``RayBackendError``: nothing is left."""
    actor_pool().make_room(ray, shape)  # idle groups of other shapes give way when the cluster lacks room
    bundle = {"CPU": shape.cpus, **({"GPU": shape.gpus} if shape.gpus else {})}
    strategy = "STRICT_SPREAD" if shape.spread else "PACK"
    group = _placement_group([dict(bundle) for _ in range(shape.workers)], strategy)
    spares = can_stand_in(shape) and actor_pool().count_spares() > 0
    actors = [] if spares else [_bundle_actor(ray, shape, group, i) for i in range(shape.workers)]
    try:
        ray.get(group.ready(), timeout=settings.placement_timeout)
    except Exception as error:
        actor_pool().release(ray, PooledGroup(group, actors))
        raise RayBackendError(placement_failure(ray, shape, bundle, strategy, error, settings.placement_timeout)) \
            from None
    nodes = bundle_nodes(group)
    if spares:
        stand_ins = take_spares(nodes or [""] * shape.workers)
        actors = [actor or _bundle_actor(ray, shape, group, i) for i, actor in enumerate(stand_ins)]
    asked = ask_zygotes(ray, nodes)  # their imports start beside the hosts' actors
    try:
        where = ray.get([a.where.remote() for a in actors], timeout=settings.actor_start_timeout)
    except Exception as error:
        actor_pool().release(ray, PooledGroup(group, actors))
        if spares:  # a spare died with its node meanwhile: place the group again with actors of its own
            actor_pool().drain_spares(ray)
            return new_group(ray, shape, settings, ask_zygotes)
        raise RayBackendError(actor_failure(error, settings.actor_start_timeout)) from None
    return Group(group, actors, where, open=set(range(shape.workers)), zygotes_asked=asked, shape=shape)


def _placement_group(bundles: list[dict[str, float]], strategy: str) -> Any:
    from ray.util.placement_group import placement_group

    return placement_group(bundles, strategy=strategy)


def _bundle_actor(ray: Any, shape: Shape, group: Any, index: int) -> Any:
    """A worker-host actor in bundle ``index`` of ``group`` (a new process on the bundle's node)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return actor_class(ray).options(
        num_cpus=shape.cpus, num_gpus=shape.gpus,  # no runtime_env: no setup_worker.py (host_actor.py's docstring)
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=index, placement_group_capture_child_tasks=False),
    ).remote()


def let_go(ray: Any, group: Group, to_pool: bool, settings: RaySettings) -> None:
    """The group's run is over: to the pool (``to_pool``: every actor idle), or its actors killed (their hosts stop
    their workers) and its placement group removed."""
    pooled = PooledGroup(group.placement_group, group.actors, tuple(int(w.get("actor_pid") or 0) for w in group.where))
    if to_pool and group.shape is not None:
        actor_pool().give_back(ray, group.shape, pooled, tuple(w["node_id"] for w in group.where),
                               settings.pool_idle_timeout, settings.pool_check_interval)
    else:
        actor_pool().release(ray, pooled)


def bundle_nodes(group: Any) -> list[str] | None:
    """The node Ray placed each bundle on (None: not known yet)."""
    try:
        from ray.util import placement_group_table

        return list(placement_group_table(group)["bundles_to_node_id"].values())
    except Exception:
        return None


def placement_failure(ray: Any, shape: Shape, bundle: dict[str, float], strategy: str, error: Exception,
                      timeout: float) -> str:
    want = " and ".join(f"{v:g} {k}" for k, v in bundle.items())
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        total = ray.cluster_resources()
        free = ray.available_resources()
        have = (f"the cluster has {len(nodes)} node(s), {free.get('CPU', 0):g} of {total.get('CPU', 0):g} CPUs"
                f" and {free.get('GPU', 0):g} of {total.get('GPU', 0):g} GPUs free")
    except Exception:
        have = "the cluster's resources could not be read"
    spread = " on separate nodes (--spread)" if strategy == "STRICT_SPREAD" else ""
    return (f"Ray could not place {shape.workers} workers with {want} each{spread} within"
            f" {timeout:g} s; {have}. Use fewer workers, lower --cpus-per-worker /"
            f" --gpus-per-worker{', drop --spread' if spread else ''}, or add nodes. Nothing was started.")
