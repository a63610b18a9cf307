"""``%%worker --detach --backend ray`` (magics/run/detach/): the run's supervisor process is the Ray driver. It
trains on after its kernel's ``kill -9``; when the supervisor process itself dies, Ray ends the actors it owns
and each host, its stdin closed, stops its worker: nothing is orphaned."""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest
from cells import worker_cell
from conftest import processes_of_run_root, wait_until
from ray_helpers import ACTORS_GONE_TIMEOUT, WORKERS_UP_TIMEOUT

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

TICKS = """\
import time
for i in range(100000):
    print("tick", i, flush=True)
    time.sleep(0.2)
"""


def _ticks(run_root, name: str) -> int:
    logs = [run_root / name / f"worker-{i}.log" for i in range(2)]
    return min(log.read_text().count("tick") if log.exists() else 0 for log in logs)


def test_a_detached_ray_run_outlives_its_kernel_and_ends_with_its_supervisor(kernel, run_root, ray_cluster):
    name = "raydetach"
    started = kernel.run(worker_cell(f"-n 2 --backend ray --address {ray_cluster.address} --name {name} --detach",
                                     TICKS))
    assert not started.error, started.text
    assert wait_until(lambda: _ticks(run_root, name) >= 3, WORKERS_UP_TIMEOUT, interval=1), "no worker ticked"
    state = json.loads((run_root / name / "state.json").read_text())
    supervisor = psutil.Process(state["kernel_pid"])
    assert state["backend"] == "ray" and state.get("detached") is True and supervisor.pid != kernel.pid
    assert "nbworkers.magics.run.detach.supervisor" in " ".join(supervisor.cmdline())
    try:
        os.kill(kernel.pid, signal.SIGKILL)
        before = _ticks(run_root, name)
        assert wait_until(lambda: _ticks(run_root, name) >= before + 10, 60), "the run stopped with its kernel"
        assert len(ray_cluster.actor_processes()) == 2
        supervisor.kill()  # the driver dies: Ray ends its actors, the hosts their workers
        assert wait_until(lambda: not ray_cluster.actor_processes(), ACTORS_GONE_TIMEOUT), ray_cluster.actor_processes()
        assert wait_until(lambda: not processes_of_run_root(run_root), 30), processes_of_run_root(run_root)
    finally:
        if supervisor.is_running():
            supervisor.kill()  # the test saw it start (its cmdline checked above)
