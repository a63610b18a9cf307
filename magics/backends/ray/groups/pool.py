"""This kernel's idle Ray worker groups: a finished run's placement group and worker-host actors, kept for the next
run of the same shape, so that a warm run starts its hosts at once through live actors (each forking its worker
from its node's zygote) instead of placing a group and starting an actor process per worker again.

What is kept, taken and let go, and when, is ``pool_core.PoolCore``'s (pure, unit-tested on a fake clock); this
module carries it out on Ray: ``release`` kills a group's actors and removes its placement group. A thread of its
own (alive only while a group is idle) lets groups go when their ``RaySettings.pool_idle_timeout`` is up, and all of
them when a placement group waits for resources (a look every ``RaySettings.pool_check_interval`` seconds).
``%workers stop --all`` and the kernel's exit (``atexit``) let every idle group go.

An idle actor hosts no worker, and it belongs to the kernel (the Ray driver, not ``detached``), as its placement
group does: when the kernel dies, even by ``kill -9``, Ray ends them both, as it ends a running run's.
"""

from __future__ import annotations

import atexit
import threading
import time
from dataclasses import dataclass
from typing import Any

from nbworkers.magics.backends.ray.actors import kill_actor, remove_placement_group
from nbworkers.magics.backends.ray.groups.core import SPARE, PoolCore, Shape

WAITING_STATES = ("PENDING", "RESCHEDULING")  # a placement group waiting for resources (ray's placement_group_table)


@dataclass
class PooledGroup:
    """A placement group and its actors, one per bundle, every actor idle (no worker host running); a spare host: no
    placement group and one actor."""

    placement_group: Any
    actors: list[Any]
    actor_pids: tuple[int, ...] = ()  # on their nodes (diagnosis and tests)


class ActorPool:
    def __init__(self, clock=time.monotonic) -> None:
        self._lock = threading.Lock()
        self._core: PoolCore[PooledGroup] = PoolCore(clock)
        self._clock = clock
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._check_interval = 5.0
        self._ray: Any = None

    def take(self, ray: Any, shape: Shape) -> tuple[PooledGroup, tuple[str, ...]] | None:
        """An idle group of ``shape`` and the node of each of its bundles, or None."""
        with self._lock:
            idle = self._core.take(shape)
        return None if idle is None else (idle.group, idle.nodes)

    def take_at(self, shape: Shape, node: str) -> PooledGroup | None:
        """An idle group of ``shape`` on ``node`` alone (a spare host, ``spares.py``), or None."""
        with self._lock:
            return self._core.take_at(shape, node)

    def count_at(self, shape: Shape, node: str | None = None) -> int:
        with self._lock:
            return self._core.count_at(shape, node)

    def count_spares(self) -> int:
        return self.count_at(SPARE)

    def drain_spares(self, ray: Any) -> None:
        """Let every spare host go (one did not answer: its node may be gone)."""
        with self._lock:
            gone = self._core.take_all(SPARE)
        self._release_all(ray, gone)

    def give_back(self, ray: Any, shape: Shape, group: PooledGroup, nodes: tuple[str, ...], keep_for: float,
                  check_interval: float) -> None:
        """A run ended with every actor of its group idle and alive: kept ``keep_for`` seconds (0: let go now)."""
        with self._lock:
            gone = self._core.give_back(shape, group, nodes, keep_for)
            self._ray, self._check_interval = ray, check_interval
            kept = len(self._core) > 0
        self._release_all(ray, gone)
        if kept:
            self._ensure_thread()

    def make_room(self, ray: Any, shape: Shape) -> None:
        """A group of ``shape`` is about to be placed: let idle groups go while the cluster's free resources do not
        cover it."""
        with self._lock:
            if not len(self._core):
                return
        try:
            free = dict(ray.available_resources())
        except Exception:
            free = {}
        with self._lock:
            gone = self._core.make_room(shape, float(free.get("CPU", 0.0)), float(free.get("GPU", 0.0)))
        self._release_all(ray, gone)

    def held_nodes(self) -> list[str]:
        with self._lock:
            return self._core.held_nodes()

    def idle_actor_pids(self) -> set[int]:
        """The pids, on their nodes, of the idle groups' actors (diagnosis and tests)."""
        with self._lock:
            return {pid for group in self._core.groups() for pid in group.actor_pids}

    def drain(self) -> int:
        """Let every idle group go (``%workers stop --all``, the kernel's exit); how many."""
        with self._lock:
            gone = self._core.drain()
            ray = self._ray
        if gone and ray is not None:
            self._release_all(ray, gone)
        return len(gone)

    def release(self, ray: Any, group: Any) -> None:
        """Kill every actor of ``group`` (a ``PooledGroup`` or the backend's group) and remove its placement group (a
        spare host has none)."""
        for actor in group.actors:
            kill_actor(ray, actor)
        if group.placement_group is not None:
            remove_placement_group(ray, group.placement_group)

    def _release_all(self, ray: Any, groups: list[PooledGroup]) -> None:
        for group in groups:
            self.release(ray, group)

    # ------------------------------------------------------------------ the idle groups' timer
    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                self._wake.set()
                return
            self._thread = threading.Thread(target=self._watch, name="nbworkers-ray-pool", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        while True:
            with self._lock:
                due = self._core.next_due()
                ray, interval = self._ray, self._check_interval
                if due is None:
                    self._thread = None
                    return
            self._wake.wait(max(0.05, min(due - self._clock(), interval)))
            self._wake.clear()
            with self._lock:
                gone = self._core.expired()
            if ray is None:
                continue
            self._release_all(ray, gone)
            if self._others_waiting(ray):
                with self._lock:
                    gone = self._core.drain()
                self._release_all(ray, gone)

    @staticmethod
    def _others_waiting(ray: Any) -> bool:
        """Does a placement group wait for resources (another driver's, or one of this kernel's that ``make_room``'s
        estimate from the cluster's total free resources let wait)?"""
        try:
            table = ray.util.placement_group_table()
        except Exception:
            return False
        return any(entry.get("state") in WAITING_STATES for entry in table.values())


_pool: ActorPool | None = None
_pool_lock = threading.Lock()


def actor_pool() -> ActorPool:
    """This kernel's pool of idle Ray worker groups."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ActorPool()
            atexit.register(_pool.drain)
        return _pool


def drain_if_used() -> int:
    """Let every idle group go, if this kernel ever used the Ray backend (else nothing is imported): how many."""
    return _pool.drain() if _pool is not None else 0
