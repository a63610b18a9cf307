"""The supervisor core (magics/run/core/supervisor.py) on a fake clock, for the unit tests that drive it with
events (tests/unit/test_run_core_supervisor.py, test_run_core_elastic.py)."""

from __future__ import annotations

from nbworkers.magics.launch import roles
from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.core.restart_policy import RestartPolicy
from nbworkers.magics.run.core.state import ClusterState, WorkerState
from nbworkers.magics.run.core.supervisor import Supervisor
from nbworkers.magics.run.core.timings import Timings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Run:
    """A supervisor on a fake clock, recording every cluster status it went through."""

    def __init__(self, workers=2, max_restarts=3, port_retries=2, backoff=1.0, backoff_max=30.0, tasks=None,
                 **timings):
        self.clock = Clock()
        tasks = tasks or roles.plan(workers)
        self.state = ClusterState(name="t", run_dir="/nonexistent",
                                  workers=[WorkerState(index=i, role=t.role) for i, t in enumerate(tasks)])
        policy = RestartPolicy(max_restarts, port_retries, backoff, backoff_max)
        timings = {"stop_grace": 5.0, "kill_margin": 2.0, "stall_timeout": 0.0, "stack_dump_wait": 3.0,
                   "evaluator_grace": 60.0, **timings}
        self.core = Supervisor(self.state, policy, Timings(**timings), tasks, clock=self.clock, wall=self.clock)
        self.statuses = [self.state.status]
        self.actions: list = []

    def send(self, event) -> list:
        actions = self.core.handle(event)
        self.actions += actions
        if self.state.status != self.statuses[-1]:
            self.statuses.append(self.state.status)
        return actions

    def tick(self, seconds: float = 0.0, idle: bool = False) -> list:
        self.clock.now += seconds
        return self.send(ev.Tick(idle=idle))

    def exit(self, *exits) -> list:
        return self.send(ev.Exited(tuple(exits)))

    def workers(self) -> list[str]:
        return [w.status for w in self.state.workers]

    def end(self) -> list:
        assert self.core.ended
        return self.send(ev.Ended())


def kinds(actions) -> list[str]:
    return [type(a).__name__ for a in actions]
