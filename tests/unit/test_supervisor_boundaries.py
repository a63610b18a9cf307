"""The supervisor core keeps every state change and never reads the machine's clock: log lines, a worker's hello,
metrics and a crash go through ``Supervisor.handle`` (magics/run/core/supervisor.py). No processes, no TensorFlow."""

from __future__ import annotations

import ast
from pathlib import Path

from nbworkers.magics.launch import roles
from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.core.restart_policy import RestartPolicy
from nbworkers.magics.run.core.state import ClusterState, WorkerState
from nbworkers.magics.run.core.supervisor import Supervisor
from nbworkers.magics.run.core.timings import Timings
from nbworkers.protocol.statuses import ClusterStatus, WorkerStatus

ROOT = Path(__file__).resolve().parents[2]
PURE = [*sorted((ROOT / "magics" / "run" / "core").glob("*.py")),
        *sorted((ROOT / "magics" / "sessions" / "core").glob("*.py"))]


class Clocks:
    def __init__(self) -> None:
        self.mono, self.wall = 50.0, 1_700_000_000.0


def supervisor(workers: int = 2) -> tuple[Supervisor, ClusterState, Clocks]:
    clocks = Clocks()
    state = ClusterState(name="t", run_dir="/nonexistent", workers=[WorkerState(index=i) for i in range(workers)])
    core = Supervisor(state, RestartPolicy(3, 2, 1.0, 30.0), Timings(stall_timeout=10.0), roles.plan(workers),
                      clock=lambda: clocks.mono, wall=lambda: clocks.wall)
    return core, state, clocks


def test_log_lines_and_hello_are_state_changes_of_the_core():
    core, state, clocks = supervisor()
    clocks.mono += 9.0
    assert core.handle(ev.Logged(1, ("epoch 1\n", "step 2\n"), hidden=4)) == []
    assert state.workers[1].log_tail.lines() == ["epoch 1", "step 2"] and state.workers[1].log_hidden == 4
    clocks.mono += 9.0  # 18 s since the start, 9 s since the log line: not stalled
    assert core.handle(ev.Tick()) == []
    assert core.handle(ev.Hello(0, 4242, "node-a")) == []
    assert (state.workers[0].pid, state.workers[0].host) == (4242, "node-a")


def test_metrics_set_the_status_through_the_core_with_the_cores_wall_clock():
    core, state, clocks = supervisor()
    worker = state.workers[0]
    worker.apply_metrics({"step": 1, "metrics": {"loss": 1.0}})
    assert worker.status == WorkerStatus.STARTING  # the state's own method changes no status
    core.handle(ev.Metrics(0, {"step": 2, "metrics": {"loss": 0.5}}))
    clocks.wall += 2.0
    core.handle(ev.Metrics(0, {"step": 6, "metrics": {"loss": 0.25}}))
    assert worker.status == WorkerStatus.RUNNING and state.status == ClusterStatus.RUNNING
    assert worker.steps_per_sec == 2.0  # (6 - 2) steps in 2 s of the injected wall clock


def test_a_crash_ends_the_run_at_the_cores_wall_time():
    core, state, clocks = supervisor()
    assert core.handle(ev.SupervisorCrashed("Traceback ...")) == [ev.KillGroup()]
    assert state.status == ClusterStatus.FAILED and state.ended == clocks.wall
    assert state.error.startswith("nbworkers supervisor crashed:")


def test_the_pure_cores_never_import_a_clock():
    for path in PURE:
        tree = ast.parse(path.read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        allowed_time = path.name == "state.py"  # only as the default of started / snapshot(now), never a decision
        assert "time" not in imported or allowed_time, f"{path.relative_to(ROOT)} imports time"
        assert not imported & {"threading", "subprocess", "zmq", "socket", "tensorflow"}, path
