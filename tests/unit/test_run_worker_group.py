"""magics/run/worker_group.py: what the supervisor thread does to all of a run's processes at once, on fake handles."""

from __future__ import annotations

from pathlib import Path

from nbworkers.magics.run.worker_group import WorkerGroup


class FakeHandle:
    def __init__(self, index: int, log_path: Path, code: int | None = None, alive: bool = True) -> None:
        self.index, self.log_path, self.code, self._alive = index, log_path, code, alive
        self.calls: list[str] = []
        self.node_label = ""  # WorkerHandle: a local worker's machine is its own host name

    def poll(self) -> int | None:
        return self.code

    def request_stop(self) -> None:
        self.calls.append("stop")

    def dump_stacks(self) -> None:
        self.calls.append("stacks")

    def pgids(self) -> list[int]:
        return []

    def alive(self) -> bool:
        return self._alive

    def kill(self) -> None:
        self.calls.append("kill")

    def close(self) -> None:
        self.calls.append("close")


def group_of(*handles: FakeHandle) -> WorkerGroup:
    group = WorkerGroup()
    group.handles.extend(handles)  # type: ignore[arg-type]  # the fakes have what the group calls
    return group


def test_exits_name_the_exited_workers_with_a_log_tail_for_a_failure_only(tmp_path):
    logs = [tmp_path / f"worker-{i}.log" for i in range(3)]
    for i, log in enumerate(logs):
        log.write_text(f"line of worker {i}\nTraceback: boom {i}\n")
    group = group_of(FakeHandle(0, logs[0], code=0), FakeHandle(1, logs[1]), FakeHandle(2, logs[2], code=-9))
    assert group.exits([0, 1, 2]) == [(0, 0, ""), (2, -9, "line of worker 2\nTraceback: boom 2")]
    assert group.exits([1]) == []  # a worker whose exit the core already knows is not asked again


def test_a_group_launched_half_way_polls_only_the_workers_it_has(tmp_path):
    group = group_of(FakeHandle(0, tmp_path / "worker-0.log", code=1))
    assert [index for index, _, _ in group.exits([0, 1, 2])] == [0]


def test_kill_reaches_only_what_is_left_and_the_group_actions_reach_every_handle(tmp_path):
    running, gone = FakeHandle(0, tmp_path / "a"), FakeHandle(1, tmp_path / "b", code=0, alive=False)
    group = group_of(running, gone)
    group.request_stop()
    group.dump_stacks()
    group.retire(1)
    group.kill()
    group.close()
    assert running.calls == ["stop", "stacks", "kill", "close"]
    assert gone.calls == ["stop", "stacks", "stop", "close"]
    assert group.node_label(0) == ""  # a local handle has no node of its own
