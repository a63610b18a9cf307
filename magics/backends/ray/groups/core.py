"""The decisions of the Ray backend's actor pool (``pool.py``), pure: which idle worker group a run takes, which
ones go when, on an injected clock.

A finished run's placement group and its worker-host actors (one per worker, each alive on its node with no
worker) are kept, idle, for ``keep_for`` seconds (``RaySettings.pool_idle_timeout``), keyed by their ``Shape``:
the number of workers, the CPUs and GPUs of each, --spread. A run of the same shape takes the newest such group
(its actors start the run's hosts at once: no placement, no new actor process); the pool lets an idle group go
(``pool.py`` kills its actors and removes its placement group) when

- it has been idle ``keep_for`` seconds (``expired``);
- a run of another shape needs the resources it holds (``make_room``: oldest first, until the free resources
  and those let go cover the new group), or the cluster waits for resources (``drain``: another's placement group
  is pending; also ``%workers stop --all`` and the kernel's exit);
- more than ``max_idle`` groups are idle (the oldest).

Spare hosts (``spares.py``) are kept here too, as groups of the shape ``SPARE``: one actor on one node, outside any
placement group, holding no resources. They expire and are drained as groups are, but they neither count toward
``max_idle`` nor are let go to make room (they hold none), and ``take_at`` takes one by its node.

Nothing here imports Ray, threads or I/O (pyproject.toml's import contracts): the unit tests drive it with fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

EPSILON = 1e-9
MAX_IDLE_GROUPS = 4  # idle groups kept at once (each holds its CPUs/GPUs on the cluster)

G = TypeVar("G")


@dataclass(frozen=True)
class Shape:
    """What a run asks of Ray: ``workers`` bundles of ``cpus`` CPUs (and ``gpus`` GPUs), one per node with
    ``spread`` (STRICT_SPREAD), else packed."""

    workers: int
    cpus: float
    gpus: int = 0
    spread: bool = False

    def need(self) -> tuple[float, float]:
        """(CPUs, GPUs) the whole group holds."""
        return self.workers * self.cpus, float(self.workers * self.gpus)

    def holds(self) -> bool:
        """Does a group of this shape hold resources of the cluster (a spare host does not)?"""
        return self.need() != (0.0, 0.0)


SPARE = Shape(workers=1, cpus=0.0)  # a spare worker host: one actor on one node, no placement group (spares.py)


@dataclass
class Idle(Generic[G]):
    """An idle group: its shape, the group itself (opaque here), the node of each bundle, since when it is idle,
    until when it is kept."""

    shape: Shape
    group: G
    nodes: tuple[str, ...]
    since: float
    until: float


class PoolCore(Generic[G]):
    def __init__(self, clock: Callable[[], float], max_idle: int = MAX_IDLE_GROUPS):
        self._clock = clock
        self._max_idle = max_idle
        self._idle: list[Idle[G]] = []  # oldest first

    def __len__(self) -> int:
        return len(self._idle)

    def take(self, shape: Shape) -> Idle[G] | None:
        """The newest idle group of ``shape`` (removed from the pool: the run holds it now), or None."""
        for index in range(len(self._idle) - 1, -1, -1):
            if self._idle[index].shape == shape:
                return self._idle.pop(index)
        return None

    def take_at(self, shape: Shape, node: str) -> G | None:
        """The newest idle group of ``shape`` on ``node`` alone (a spare host there), removed, or None."""
        for index in range(len(self._idle) - 1, -1, -1):
            if self._idle[index].shape == shape and self._idle[index].nodes == (node,):
                return self._idle.pop(index).group
        return None

    def count_at(self, shape: Shape, node: str | None = None) -> int:
        """How many idle groups of ``shape`` there are (on ``node`` alone, when given)."""
        return sum(1 for idle in self._idle if idle.shape == shape and (node is None or idle.nodes == (node,)))

    def take_all(self, shape: Shape) -> list[G]:
        """Every idle group of ``shape``, removed."""
        gone = [idle for idle in self._idle if idle.shape == shape]
        self._idle = [idle for idle in self._idle if idle.shape != shape]
        return [idle.group for idle in gone]

    def give_back(self, shape: Shape, group: G, nodes: tuple[str, ...], keep_for: float) -> list[G]:
        """A run ended with its group intact (or a spare host was made): keep it ``keep_for`` seconds. Returns the
        groups to let go now (``group`` itself when ``keep_for`` <= 0, the pool being off; the oldest of those
        holding resources beyond ``max_idle``)."""
        if keep_for <= 0:
            return [group]
        now = self._clock()
        self._idle.append(Idle(shape, group, tuple(nodes), now, now + keep_for))
        holding = [idle for idle in self._idle if idle.shape.holds()]
        evicted = holding[:-self._max_idle] if len(holding) > self._max_idle else []
        self._idle = [idle for idle in self._idle if all(idle is not gone for gone in evicted)]
        return [idle.group for idle in evicted]

    def expired(self) -> list[G]:
        """The groups idle for their whole ``keep_for``, removed."""
        now = self._clock()
        gone = [idle for idle in self._idle if idle.until <= now]
        self._idle = [idle for idle in self._idle if idle.until > now]
        return [idle.group for idle in gone]

    def make_room(self, shape: Shape, free_cpus: float, free_gpus: float) -> list[G]:
        """Before a new group of ``shape`` is placed (none of that shape was idle): the idle groups to let go,
        oldest first, until the cluster's free resources and theirs cover it (all of them if even that does not)."""
        need_cpus, need_gpus = shape.need()
        gone: list[Idle[G]] = []
        for idle in self._idle:
            if free_cpus + EPSILON >= need_cpus and free_gpus + EPSILON >= need_gpus:
                break
            if not idle.shape.holds():  # a spare host: letting it go frees nothing
                continue
            cpus, gpus = idle.shape.need()
            free_cpus, free_gpus = free_cpus + cpus, free_gpus + gpus
            gone.append(idle)
        self._idle = [idle for idle in self._idle if idle not in gone]
        return [idle.group for idle in gone]

    def drain(self) -> list[G]:
        """Every idle group, removed (``%workers stop --all``, the kernel's exit, the cluster's pending demand)."""
        gone, self._idle = self._idle, []
        return [idle.group for idle in gone]

    def groups(self) -> list[G]:
        """The idle groups, oldest first."""
        return [idle.group for idle in self._idle]

    def held_nodes(self) -> list[str]:
        """The node of each bundle the idle groups hold (an elastic run counts them as room: they are ours)."""
        return [node for idle in self._idle if idle.shape.holds() for node in idle.nodes]

    def next_due(self) -> float | None:
        """When the next idle group expires (the clock's time), or None when none is idle."""
        return min((idle.until for idle in self._idle), default=None)
