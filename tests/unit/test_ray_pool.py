"""The Ray backend's pool carried out (magics/backends/ray/groups/pool.py, groups/place.py): idle groups given back, taken by a
run of their shape with their actors asked again where they are, and let go (actors killed, placement group
removed). Ray is faked: its calls are recorded, nothing starts."""

from __future__ import annotations

import types

import pytest

import nbworkers.magics.backends.ray.groups.pool as pool_module
from nbworkers.kernel_driver import wait_until
from nbworkers.magics.backends.ray.groups import place as groups
from nbworkers.magics.backends.ray.groups import spares
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


class FakePlacementGroup:
    def __init__(self, name: str):
        self.name = name

    def ready(self):
        return lambda: True  # a "ref": placed at once


@pytest.fixture
def placed(monkeypatch):
    """new_group on fakes: placement groups named pg1, pg2...; bundle actors pid 500+; the bundles' nodes given."""
    made = {"groups": [], "actors": [], "spares": [], "nodes": ["node-a", "node-b"]}

    def placement_group(bundles, strategy):
        made["groups"].append(FakePlacementGroup(f"pg{len(made['groups']) + 1}"))
        return made["groups"][-1]

    def bundle_actor(ray, shape, group, index):
        made["actors"].append(FakeActor(500 + len(made["actors"]), made["nodes"][index]))
        return made["actors"][-1]

    def new_spare(ray, node_id):
        made["spares"].append(FakeActor(900 + len(made["spares"]), node_id))
        return made["spares"][-1]

    monkeypatch.setattr(groups, "_placement_group", placement_group)
    monkeypatch.setattr(groups, "_bundle_actor", bundle_actor)
    monkeypatch.setattr(groups, "bundle_nodes", lambda group: list(made["nodes"]))
    monkeypatch.setattr(spares, "_new_spare", new_spare)
    return made


def test_spare_hosts_stand_in_for_a_new_groups_actors_one_per_node(pool, placed):
    ray = FakeRay(free_cpus=4.0)
    settings = RaySettings(pool_idle_timeout=60)
    assert spares.make_spares(ray, ["node-a", "node-b", "node-a"], settings) == 2
    assert spares.make_spares(ray, ["node-a"], settings) == 0  # one spare a node
    group = groups.new_group(ray, SHAPE, settings, lambda r, nodes: nodes)
    assert group.actors == placed["spares"] and placed["actors"] == []
    assert [w["node_id"] for w in group.where] == ["node-a", "node-b"] and group.zygotes_asked == ["node-a", "node-b"]
    assert pool.count_spares() == 0 and pool.held_nodes() == []
    # packed on one node with one spare there: the spare and an actor of the bundle's own
    spares.make_spares(ray, ["node-a"], settings)
    placed["nodes"] = ["node-a", "node-a"]
    packed = groups.new_group(ray, Shape(workers=2, cpus=1.0), settings, lambda r, nodes: None)
    assert packed.actors == [placed["spares"][2], placed["actors"][0]]


def test_no_spare_stands_in_where_it_would_differ_and_none_is_made_with_the_pool_off(pool, placed):
    ray = FakeRay(free_cpus=8.0)
    settings = RaySettings(pool_idle_timeout=60)
    spares.make_spares(ray, ["node-a", "node-b"], settings)
    for shape in (Shape(workers=2, cpus=1.0, gpus=1), Shape(workers=2, cpus=2.0)):  # GPUs, OMP_NUM_THREADS
        group = groups.new_group(ray, shape, settings, lambda r, nodes: None)
        assert all(500 <= a.pid < 900 for a in group.actors)  # actors of the bundles, no spare
    assert pool.count_spares() == 2
    assert drain_if_used() == 2 and ray.killed == placed["spares"]  # %workers stop --all, the kernel's exit
    assert spares.make_spares(ray, ["node-a"], RaySettings(pool_idle_timeout=0)) == 0


def test_a_dead_spare_lets_every_spare_go_and_the_group_is_placed_again_with_actors_of_its_own(pool, placed):
    ray = FakeRay(free_cpus=4.0)
    settings = RaySettings(pool_idle_timeout=60)
    spares.make_spares(ray, ["node-a", "node-b", "node-c"], settings)
    placed["spares"][1].dead = True  # its node went away
    group = groups.new_group(ray, SHAPE, settings, lambda r, nodes: None)
    assert group.actors == placed["actors"] and group.placement_group.name == "pg2"
    assert ray.removed == [placed["groups"][0]] and set(ray.killed) == set(placed["spares"])
    assert pool.count_spares() == 0
