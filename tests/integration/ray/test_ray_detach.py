"""``%%worker --detach --backend ray`` (magics/run/detach/): the run's supervisor process is the Ray driver. It
trains on after its kernel's ``kill -9``; when the supervisor process itself dies, Ray ends the actors it owns
and each host, its stdin closed, stops its worker: nothing is orphaned. A detached session on Ray
(magics/sessions/detach/) keeps its workers' state for a new kernel's cell."""

from __future__ import annotations

import json
import os
import signal
import sys

import psutil
import pytest
from cells import worker_cell
from conftest import Kernel, processes_of_run_root, wait_until
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


def test_a_detached_ray_session_keeps_its_state_for_a_new_kernel(kernel, kernel_env, run_root, ray_cluster, tmp_path):
    """Kernel A starts session rd on two Ray nodes, detached, and is killed; kernel B's next cell runs in the same
    workers with their state; `%workers stop rd` ends it and nothing of it is left on any node."""
    first = kernel.run(f"%%worker -n 2 --backend ray --address {ray_cluster.address} --spread --session rd --detach "
                       "--block\nimport os\nx = 40 + int(os.environ['NBWORKERS_WORKER'])\nprint('X', x)\n",
                       timeout=WORKERS_UP_TIMEOUT + 120)
    assert not first.error and "X 40" in first.stdout, first.text
    state = json.loads((run_root / "rd" / "state.json").read_text())
    supervisor = psutil.Process(state["kernel_pid"])
    assert state["backend"] == "ray" and state.get("detached") is True and supervisor.pid != kernel.pid
    second = None
    try:
        os.kill(kernel.pid, signal.SIGKILL)
        second = Kernel(tmp_path / "notebook", kernel_env,
                        kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
        assert not second.run("%load_ext nbworkers\nimport nbworkers").error
        ran = second.run("%%worker --session rd --block --display all\nprint('Y', x + 1)\nx", timeout=120)
        assert not ran.error, ran.text
        assert "Y 41" in ran.stdout and "Y 42" in ran.stdout, ran.text
        assert second.value("nbworkers.session('rd').pull('x', worker=1)") == 41
        stopped = second.run("%workers stop rd")
        assert not stopped.error, stopped.text
        assert wait_until(lambda: not supervisor.is_running() or supervisor.status() == psutil.STATUS_ZOMBIE, 30)
        assert wait_until(lambda: not ray_cluster.actor_processes(), ACTORS_GONE_TIMEOUT), ray_cluster.actor_processes()
        assert wait_until(lambda: not processes_of_run_root(run_root), 30), processes_of_run_root(run_root)
    finally:
        if second is not None:
            second.shutdown()
        if supervisor.is_running():
            supervisor.kill()  # the test saw it start (its state.json names it)
