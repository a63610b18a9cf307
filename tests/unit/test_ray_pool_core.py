"""The Ray backend's pool of idle worker groups, its decisions alone (magics/backends/ray/groups/core.py), on a fake
clock: which group a run takes, and when idle groups go."""

from __future__ import annotations

from nbworkers.magics.backends.ray.groups.core import SPARE, PoolCore, Shape


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


THREE_SPREAD = Shape(workers=3, cpus=1.0, spread=True)
TWO_PACKED = Shape(workers=2, cpus=1.0)


def test_a_run_takes_the_newest_idle_group_of_its_shape_and_only_of_its_shape():
    clock = Clock()
    pool: PoolCore[str] = PoolCore(clock)
    assert pool.give_back(THREE_SPREAD, "old", ("a", "b", "c"), keep_for=60) == []
    clock.now += 1
    pool.give_back(THREE_SPREAD, "new", ("a", "b", "c"), keep_for=60)
    pool.give_back(TWO_PACKED, "two", ("a", "a"), keep_for=60)
    assert pool.take(Shape(workers=3, cpus=1.0, spread=False)) is None  # --spread is part of the shape
    assert pool.take(Shape(workers=3, cpus=0.5, spread=True)) is None  # so are the CPUs of each worker
    taken = pool.take(THREE_SPREAD)
    assert taken is not None and taken.group == "new" and taken.nodes == ("a", "b", "c")
    assert pool.take(THREE_SPREAD).group == "old"
    assert pool.take(THREE_SPREAD) is None
    assert len(pool) == 1


def test_with_the_pool_off_a_group_given_back_is_let_go_at_once():
    pool: PoolCore[str] = PoolCore(Clock())
    assert pool.give_back(TWO_PACKED, "g", ("a", "b"), keep_for=0) == ["g"]
    assert len(pool) == 0 and pool.take(TWO_PACKED) is None


def test_idle_groups_expire_after_their_idle_time_and_say_when_the_next_one_is_due():
    clock = Clock()
    pool: PoolCore[str] = PoolCore(clock)
    assert pool.next_due() is None
    pool.give_back(TWO_PACKED, "first", ("a", "b"), keep_for=10)
    clock.now += 5
    pool.give_back(THREE_SPREAD, "second", ("a", "b", "c"), keep_for=10)
    assert pool.next_due() == 110.0
    clock.now = 109.9
    assert pool.expired() == []
    clock.now = 110.0
    assert pool.expired() == ["first"]
    assert pool.next_due() == 115.0
    clock.now = 200.0
    assert pool.expired() == ["second"] and pool.next_due() is None


def test_a_group_taken_again_is_no_longer_the_pools_to_expire():
    clock = Clock()
    pool: PoolCore[str] = PoolCore(clock)
    pool.give_back(TWO_PACKED, "g", ("a", "b"), keep_for=10)
    assert pool.take(TWO_PACKED).group == "g"
    clock.now += 60
    assert pool.expired() == [] and pool.held_nodes() == []


def test_a_new_shape_makes_room_oldest_first_only_as_far_as_the_cluster_lacks_it():
    clock = Clock()
    pool: PoolCore[str] = PoolCore(clock)
    pool.give_back(Shape(workers=1, cpus=1.0), "one", ("a",), keep_for=60)
    pool.give_back(TWO_PACKED, "two", ("b", "b"), keep_for=60)
    assert pool.held_nodes() == ["a", "b", "b"]  # counted as room by an elastic run
    assert pool.make_room(THREE_SPREAD, free_cpus=3.0, free_gpus=0.0) == []  # the cluster has room besides
    assert pool.make_room(THREE_SPREAD, free_cpus=2.0, free_gpus=0.0) == ["one"]  # 2 free + 1 of "one"
    assert pool.make_room(THREE_SPREAD, free_cpus=0.0, free_gpus=0.0) == ["two"]  # all it has, though short
    assert len(pool) == 0


def test_gpus_count_when_making_room():
    pool: PoolCore[str] = PoolCore(Clock())
    pool.give_back(Shape(workers=2, cpus=1.0, gpus=1), "gpus", ("a", "b"), keep_for=60)
    assert pool.make_room(Shape(workers=1, cpus=1.0, gpus=1), free_cpus=8.0, free_gpus=0.0) == ["gpus"]


def test_at_most_max_idle_groups_are_kept_the_oldest_goes():
    pool: PoolCore[int] = PoolCore(Clock(), max_idle=2)
    assert pool.give_back(TWO_PACKED, 1, ("a", "b"), keep_for=60) == []
    assert pool.give_back(TWO_PACKED, 2, ("a", "b"), keep_for=60) == []
    assert pool.give_back(TWO_PACKED, 3, ("a", "b"), keep_for=60) == [1]
    assert pool.groups() == [2, 3]
    assert pool.drain() == [2, 3] and len(pool) == 0 and pool.next_due() is None


def test_spare_hosts_are_taken_by_node_hold_nothing_and_expire_like_groups():
    clock = Clock()
    pool: PoolCore[str] = PoolCore(clock, max_idle=1)
    pool.give_back(SPARE, "spare-a", ("a",), keep_for=60)
    pool.give_back(SPARE, "spare-b", ("b",), keep_for=30)
    assert pool.give_back(TWO_PACKED, "group", ("a", "a"), keep_for=60) == []  # spares do not count toward max_idle
    assert pool.count_at(SPARE) == 2 and pool.count_at(SPARE, "a") == 1 and pool.count_at(SPARE, "c") == 0
    assert pool.held_nodes() == ["a", "a"]  # a spare holds no resources: not room for an elastic run
    assert pool.make_room(THREE_SPREAD, free_cpus=1.0, free_gpus=0.0) == ["group"]  # spares free nothing
    assert pool.take_at(SPARE, "c") is None and pool.take_at(SPARE, "a") == "spare-a"
    clock.now += 31
    assert pool.expired() == ["spare-b"] and len(pool) == 0
    pool.give_back(SPARE, "s1", ("a",), keep_for=60)
    pool.give_back(SPARE, "s2", ("b",), keep_for=60)
    assert pool.take_all(SPARE) == ["s1", "s2"] and len(pool) == 0
