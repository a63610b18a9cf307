"""``%%worker --detach`` (magics/run/detach/supervisor.py): a run whose loop lives in a supervisor process of its own trains on
after its kernel's ``kill -9``; a second kernel gets a live handle on it, sees it advance, stops it with
``%workers stop NAME``, and nothing of it is left (hosts, workers, the supervisor). Without --detach a run ends
with its kernel: test_worker_magic.py::test_killing_the_kernel_takes_its_workers_along."""

from __future__ import annotations

import json
import os
import signal
import sys

import psutil
from cells import worker_cell
from conftest import Kernel, processes_of_run_root, wait_until

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
TICKS = """\
import time
print(cfg["tag"], flush=True)
for i in range(100000):
    print("tick", i, flush=True)
    time.sleep(0.2)
"""


def _ticks(run_root, name: str) -> int:
    log = run_root / name / "worker-0.log"
    return log.read_text().count("tick") if log.exists() else 0


def test_detached_run_outlives_a_killed_kernel_and_another_kernel_stops_it(kernel, kernel_env, run_root, tmp_path):
    refused = kernel.run("%%worker --detach --session s1\nprint(1)\n")
    assert "not supported yet" in refused.stderr and not list(run_root.iterdir())  # a UsageError
    assert not kernel.run("cfg = {'tag': 'pushed-' + 'ok'}").error
    started = kernel.run(worker_cell("-n 2 --detach --name far --push cfg", TICKS))
    assert not started.error, started.error
    assert any(WIDGET_MIME in shown for shown in started.displays), started.displays  # the live widget, as before
    assert wait_until(lambda: _ticks(run_root, "far") >= 3, 90), "the detached run did not start ticking"
    assert "pushed-ok" in (run_root / "far" / "worker-0.log").read_text()  # --push reaches the workers
    state = json.loads((run_root / "far" / "state.json").read_text())
    supervisor = psutil.Process(state["kernel_pid"])  # the run's liveness is its supervisor's, not the kernel's
    assert state.get("detached") is True and supervisor.pid != kernel.pid
    assert "nbworkers.magics.run.detach.supervisor" in " ".join(supervisor.cmdline())
    try:
        os.kill(kernel.pid, signal.SIGKILL)
        before = _ticks(run_root, "far")
        assert wait_until(lambda: _ticks(run_root, "far") >= before + 5, 30), "the run stopped with its kernel"
        assert supervisor.is_running() and len(processes_of_run_root(run_root)) >= 4

        second = Kernel(tmp_path / "notebook", kernel_env,
                        kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
        try:
            assert not second.run("%load_ext nbworkers\nimport nbworkers").error
            assert second.value("nbworkers.get_cluster('far').status") == "running"  # not lost: its supervisor lives
            seen = second.value("len(nbworkers.get_cluster('far').logs(0).splitlines())")
            assert wait_until(lambda: second.value("len(nbworkers.get_cluster('far').logs(0).splitlines())") > seen,
                              30), "the attached handle does not see the run advance"
            stopped = second.run("%workers stop far")
            assert not stopped.error, stopped.error
            assert second.value("nbworkers.get_cluster('far').done") is True
            assert second.value("nbworkers.get_cluster('far').status") in ("stopped", "failed")
        finally:
            second.shutdown()
        assert wait_until(lambda: not supervisor.is_running() or supervisor.status() == psutil.STATUS_ZOMBIE, 20)
        assert wait_until(lambda: not processes_of_run_root(run_root, zygotes=True), 20), "the run left processes"
    finally:
        if supervisor.is_running():
            supervisor.kill()  # the test saw it start (its cmdline checked above)
