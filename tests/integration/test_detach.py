"""``%%worker --detach`` (magics/run/detach/supervisor.py): a run whose loop lives in a supervisor process of its own trains on
after its kernel's ``kill -9``; a second kernel gets a live handle on it, sees it advance, stops it with
``%workers stop NAME``, and nothing of it is left (hosts, workers, the supervisor). A detached session
(magics/sessions/detach/) keeps cell 1's state after its kernel's ``kill -9``, and a new kernel's cells run in it.
Without --detach a run ends with its kernel: test_worker_magic.py::test_killing_the_kernel_takes_its_workers_along."""

from __future__ import annotations

import json
import os
import signal
import sys

import psutil
from cells import worker_cell
from conftest import Kernel, ended, processes_of_run_root, wait_until

from nbworkers.magics.rundir.listing import describe

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


CELL_1 = """\
%%worker -n 2 --session s --detach --block
import tensorflow as tf
x = 41
v = tf.Variable(3.0)
print("CELL 1 DONE")
"""


def _second_kernel(tmp_path, kernel_env) -> Kernel:
    return Kernel(tmp_path / "notebook", kernel_env,
                  kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])


def test_detached_session_keeps_its_state_for_a_new_kernel(kernel, kernel_env, run_root, tmp_path):
    """Kernel A starts session s detached (cell 1: x and a tf.Variable) and is killed; the session lives on and is
    listed with its cells; kernel B's cells run in it (output, value, error, pull), `%workers stop s` ends it and
    nothing is left. A detached session whose supervisor dies takes its workers along (session t)."""
    started = kernel.run("%%worker -n 1 --session t --detach\ny = 1")  # returns at once: starts meanwhile
    assert not started.error, started.text
    first = kernel.run(CELL_1, timeout=240)
    assert not first.error and "CELL 1 DONE" in first.stdout, first.text
    state = json.loads((run_root / "s" / "state.json").read_text())
    supervisor = psutil.Process(state["kernel_pid"])
    assert state.get("detached") is True and supervisor.pid != kernel.pid
    assert "nbworkers.magics.sessions.detach.supervisor" in " ".join(supervisor.cmdline())
    second = None
    try:
        os.kill(kernel.pid, signal.SIGKILL)
        assert wait_until(lambda: ended(kernel.pid), 20)
        def listed() -> dict:  # what the REST API and the sidebar show (state.json is written every second)
            return describe(run_root / "s", full=True) or {}

        assert wait_until(lambda: listed()["status"] == "running" and listed()["session"]["cells"] == 1, 10), listed()
        assert supervisor.is_running() and len(processes_of_run_root(run_root / "s")) >= 2

        second = _second_kernel(tmp_path, kernel_env)
        assert not second.run("%load_ext nbworkers\nimport nbworkers").error
        ran = second.run('%%worker --session s --block\nprint("X", x + 1)\nfloat(v.numpy())', timeout=120)
        assert not ran.error, ran.text
        assert "X 42" in ran.stdout and ran.displays[-1]["text/plain"] == "3.0", ran.text
        failed = second.run("%%worker --session s --block\nraise KeyError('from a detached session')")
        assert failed.status == "error" and "RunFailed" in failed.error and "KeyError" in failed.error, failed.text
        assert second.value("nbworkers.session('s').pull('x')") == 42 - 1
        nothing = second.run("%workers restore s")  # asked of its supervisor (unit-tested: a restore that runs)
        assert nothing.status == "error" and "session 's' saved nothing to restore" in nothing.stderr, nothing.text
        assert second.value("nbworkers.session('s').pull('tf.stack([v, v * 2])').tolist()") == [3.0, 6.0]
        assert wait_until(lambda: listed()["session"]["cells"] == 3, 10), listed()

        assert second.value("nbworkers.session('t').pull('y')") == 1  # after its cell 1, which kernel A submitted
        lone = psutil.Process(json.loads((run_root / "t" / "state.json").read_text())["kernel_pid"])
        lone_channel = json.loads((run_root / "t" / "session-client.json").read_text())["socket"]
        lone.kill()  # its supervisor dies: its worker ends with it
        assert wait_until(lambda: not processes_of_run_root(run_root / "t", zygotes=True), 30), "t left processes"
        assert os.path.exists(lone_channel)  # a killed process removes nothing: the next %load_ext's scan does
        assert not second.run("from nbworkers.magics.rundir.leftovers import scan_at_load\nscan_at_load().join()").error
        assert not os.path.exists(lone_channel) and not (run_root / "t" / "session-client.json").exists()
        assert json.loads((run_root / "t" / "state.json").read_text())["status"] == "stopped"

        channel = json.loads((run_root / "s" / "session-client.json").read_text())["socket"]
        stopped = second.run("%workers stop s")
        assert not stopped.error, stopped.text
        assert second.value("nbworkers.get_cluster('s').done") is True
        assert json.loads((run_root / "s" / "state.json").read_text())["status"] in ("stopped", "failed")
        assert not os.path.exists(channel) and not (run_root / "s" / "session-client.json").exists()
        assert wait_until(lambda: not supervisor.is_running() or supervisor.status() == psutil.STATUS_ZOMBIE, 20)
        assert wait_until(lambda: not processes_of_run_root(run_root, zygotes=True), 20), "the session left processes"
    finally:
        if second is not None:
            second.shutdown()
        if supervisor.is_running():
            supervisor.kill()  # the test saw it start (its cmdline checked above)
