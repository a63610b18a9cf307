"""The Ray backend's pool carried out (magics/backends/ray/groups/pool.py, groups/place.py): idle groups given back, taken by a
run of their shape with their actors asked again where they are, and let go (actors killed, placement group
removed). Ray is faked: its calls are recorded, nothing starts."""

from __future__ import annotations

import types

import pytest

import nbworkers.magics.backends.ray.groups.pool as pool_module
from nbworkers.kernel_driver import wait_until
from nbworkers.magics.backends.ray.groups import place as groups
from nbworkers.magics.backends.ray.groups.core import Shape
from nbworkers.magics.backends.ray.groups.pool import ActorPool, PooledGroup, drain_if_used
from nbworkers.magics.backends.ray.ray_settings import RaySettings


class Call:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        return lambda: self.fn(*args, **kwargs)  # a "ref": ray.get calls it


class FakeActor:
    def __init__(self, pid: int, node: str):
        self.pid, self.node, self.dead, self.asked = pid, node, False, 0
        self.where = Call(self._where)

    def _where(self):
        if self.dead:
            raise RuntimeError("ActorDiedError: the actor died")
        self.asked += 1
        return {"ip": "127.0.0.2", "port": 40000 + self.asked, "gpus": [], "node_id": self.node,
                "actor_pid": self.pid, "relay_client_key": ""}


class FakeRay:
    def __init__(self, free_cpus: float = 0.0):
        self.killed: list[FakeActor] = []
        self.removed: list[str] = []
        self.free = {"CPU": free_cpus}
        self.waiting: list[str] = []
        self.util = types.SimpleNamespace(remove_placement_group=self.removed.append,
                                          placement_group_table=self._table)

    def get(self, refs, timeout=None):
        return [ref() for ref in refs] if isinstance(refs, list) else refs()

    def kill(self, actor, no_restart=True):
        self.killed.append(actor)

    def available_resources(self):
        return dict(self.free)

    def _table(self):
        return {name: {"state": "PENDING"} for name in self.waiting}


SHAPE = Shape(workers=2, cpus=1.0, spread=True)


@pytest.fixture
def pool(monkeypatch) -> ActorPool:
    fresh = ActorPool()
    monkeypatch.setattr(pool_module, "_pool", fresh)
    return fresh


def idle_group(name: str = "pg") -> tuple[PooledGroup, list[FakeActor]]:
    actors = [FakeActor(101, "node-a"), FakeActor(102, "node-b")]
    return PooledGroup(name, actors, (101, 102)), actors


def test_a_group_given_back_is_taken_by_the_next_run_of_its_shape_its_actors_asked_again(pool):
    ray = FakeRay()
    settings = RaySettings(pool_idle_timeout=60)
    pooled, actors = idle_group()
    pool.give_back(ray, SHAPE, pooled, ("node-a", "node-b"), 60, 5)
    assert pool.idle_actor_pids() == {101, 102} and pool.held_nodes() == ["node-a", "node-b"]
    asked = []
    assert groups.pooled_group(ray, Shape(workers=3, cpus=1.0, spread=True), settings,
                               lambda r, nodes: asked.append(nodes)) is None  # another shape
    group = groups.pooled_group(ray, SHAPE, settings, lambda r, nodes: asked.append(nodes) or "asked")
    assert group is not None and group.actors == actors and group.placement_group == "pg"
    assert [w["port"] for w in group.where] == [40001, 40001]  # each actor asked again: a fresh port
    assert asked == [["node-a", "node-b"]] and group.zygotes_asked == "asked" and group.open == {0, 1}
    assert pool.idle_actor_pids() == set() and ray.killed == [] and ray.removed == []


def test_a_pooled_group_whose_actor_died_is_released_and_a_new_one_placed(pool):
    ray = FakeRay()
    pooled, actors = idle_group()
    pool.give_back(ray, SHAPE, pooled, ("node-a", "node-b"), 60, 5)
    actors[1].dead = True  # its node went away while the group was idle
    assert groups.pooled_group(ray, SHAPE, RaySettings(pool_idle_timeout=60), lambda r, nodes: None) is None
    assert ray.killed == actors and ray.removed == ["pg"] and pool.idle_actor_pids() == set()


def test_with_the_pool_off_nothing_is_taken_and_a_finished_group_is_released(pool):
    ray = FakeRay()
    settings = RaySettings(pool_idle_timeout=0)
    _, actors = idle_group()
    group = groups.Group("pg", actors, [a._where() for a in actors], shape=SHAPE)
    groups.let_go(ray, group, to_pool=True, settings=settings)
    assert ray.killed == actors and ray.removed == ["pg"]
    assert groups.pooled_group(ray, SHAPE, settings, lambda r, nodes: None) is None


def test_let_go_keeps_an_intact_group_and_releases_a_broken_one(pool):
    ray = FakeRay()
    settings = RaySettings(pool_idle_timeout=60)
    _, actors = idle_group()
    groups.let_go(ray, groups.Group("kept", actors, [a._where() for a in actors], shape=SHAPE), True, settings)
    assert pool.idle_actor_pids() == {101, 102} and ray.killed == []
    broken = [FakeActor(201, "node-a"), FakeActor(202, "node-b")]
    groups.let_go(ray, groups.Group("broken", broken, [a._where() for a in broken], shape=SHAPE), False, settings)
    assert ray.killed == broken and ray.removed == ["broken"]


def test_a_new_shape_makes_room_when_the_cluster_lacks_it_and_stop_all_drains_the_rest(pool):
    ray = FakeRay(free_cpus=1.0)
    first, first_actors = idle_group("first")
    second = PooledGroup("second", [FakeActor(301, "node-c")], (301,))
    pool.give_back(ray, SHAPE, first, ("node-a", "node-b"), 60, 5)
    pool.give_back(ray, Shape(workers=1, cpus=1.0), second, ("node-c",), 60, 5)
    pool.make_room(ray, Shape(workers=1, cpus=1.0, gpus=0, spread=True))  # 1 CPU free: room already
    assert ray.removed == []
    pool.make_room(ray, Shape(workers=3, cpus=1.0, spread=True))  # 1 free + the oldest group's 2
    assert ray.removed == ["first"] and ray.killed == first_actors and pool.idle_actor_pids() == {301}
    assert drain_if_used() == 1 and ray.removed == ["first", "second"] and pool.idle_actor_pids() == set()


def test_an_idle_group_goes_after_its_idle_time_or_when_a_placement_group_waits(pool):
    ray = FakeRay()
    expiring, _ = idle_group("expiring")
    pool.give_back(ray, SHAPE, expiring, ("node-a", "node-b"), keep_for=0.05, check_interval=5)
    assert wait_until(lambda: ray.removed == ["expiring"], 10, interval=0.02)
    waited_on, _ = idle_group("waited-on")
    pool.give_back(ray, SHAPE, waited_on, ("node-a", "node-b"), keep_for=600, check_interval=0.05)
    ray.waiting.append("another driver's group")
    assert wait_until(lambda: ray.removed == ["expiring", "waited-on"], 10, interval=0.02)
    assert wait_until(lambda: pool._thread is None, 10, interval=0.02)  # nothing idle: the timer thread ended
