"""The group restart policy and the watchdog, with light (TensorFlow-free) workers through a real kernel."""

from __future__ import annotations

import os
import signal

import pytest
from cells import KILLABLE, worker_cell
from conftest import processes_of_run_root, wait_until

# Generation 0 waits to be killed; the restarted generation finishes.
KILLABLE_CELL = worker_cell("-n 2 --name {name} {flags}", KILLABLE)
pytestmark = pytest.mark.share_kernel  # one kernel for these tests (tests/shared_kernel.py)


def worker_pid(kernel, name: str, index: int) -> int | None:
    return kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()['workers'][{index}]['pid']")


def assert_wait_raises_run_failed(kernel, name: str, timeout: int, *says: str) -> None:
    """`%workers wait` on a run that failed fails the cell with RunFailed (a headless run exits non-zero), saying why."""
    result = kernel.run(f"%workers wait {name} --timeout {timeout}")
    assert result.status == "error" and result.error.startswith(f"RunFailed: run {name!r} failed: "), result.text
    for text in says:
        assert text in result.error, result.error


def test_killed_worker_restarts_the_whole_group(kernel, run_root):
    assert not kernel.run(KILLABLE_CELL.format(name="phoenix", flags="--max-restarts 2")).error
    assert wait_until(lambda: worker_pid(kernel, "phoenix", 1) is not None, 60)
    first_pids = [worker_pid(kernel, "phoenix", i) for i in (0, 1)]
    os.kill(first_pids[1], signal.SIGKILL)
    assert not kernel.run("%workers wait phoenix --timeout 120").error
    snap = kernel.value("nbworkers.get_cluster('phoenix').snapshot()")
    assert snap["status"] == "finished", snap["error"]
    assert snap["restarts"] == 1 and snap["generation"] == 1
    entry = snap["restart_history"][0]
    assert entry["kind"] == "WorkerCrashed" and entry["worker"] == 1 and "SIGKILL" in entry["cause"]
    # the whole group was restarted, never a single worker: worker 0 is a new process too
    assert all(w["pid"] not in first_pids for w in snap["workers"])
    logs = kernel.run("%workers logs phoenix").stdout
    assert "[0] generation 1" in logs and "[1] generation 1" in logs
    assert not processes_of_run_root(run_root)


def test_exception_in_user_code_is_not_retried(kernel, run_root):
    cell = """%%worker -n 2 --name broken --max-restarts 3
raise RuntimeError("a bug, not bad luck")
"""
    assert not kernel.run(cell).error
    assert_wait_raises_run_failed(kernel, "broken", 60, "RuntimeError: a bug, not bad luck")
    snap = kernel.value("nbworkers.get_cluster('broken').snapshot()")
    assert snap["status"] == "failed" and snap["restarts"] == 0
    assert snap["failure_kind"] == "WorkerRaised"
    assert "RuntimeError: a bug, not bad luck" in snap["error"]


def test_a_worker_that_exits_0_before_its_cells_end_is_no_finish(kernel, run_root):
    """"finished" means every worker reached its cell's end: worker 1 leaves with os._exit(0) half-way (as a library's
    thread might) and the run fails, saying where it was; sys.exit(0) in the cell is the cell's own end."""
    cell = """%%worker -n 2 --name early --max-restarts 0
import os, sys
print("HALF-WAY", flush=True)
if int(os.environ["NBWORKERS_WORKER"]) == 1:
    os._exit(0)
if int(os.environ["NBWORKERS_WORKER"]) == 0:
    sys.exit(0)
print("NEVER")
"""
    assert not kernel.run(cell).error
    assert_wait_raises_run_failed(kernel, "early", 60, "worker 1 exited with code 0 before the end of its cell",
                                  "its last output: HALF-WAY")
    snap = kernel.value("nbworkers.get_cluster('early').snapshot()")
    assert snap["status"] == "failed" and snap["failure_kind"] == "RestartsExhausted", snap
    assert snap["workers"][1]["status"] == "failed", snap["workers"]  # (worker 0 may have been stopped first)
    assert not processes_of_run_root(run_root)


def test_restart_limit_turns_a_crash_into_a_failure(kernel, run_root):
    assert not kernel.run(KILLABLE_CELL.format(name="fragile", flags="--max-restarts 0")).error
    assert wait_until(lambda: worker_pid(kernel, "fragile", 0) is not None, 60)
    os.kill(worker_pid(kernel, "fragile", 0), signal.SIGKILL)
    assert_wait_raises_run_failed(kernel, "fragile", 60, "no restarts left: --max-restarts 0", "SIGKILL")
    snap = kernel.value("nbworkers.get_cluster('fragile').snapshot()")
    assert snap["status"] == "failed" and snap["restarts"] == 0
    assert snap["failure_kind"] == "RestartsExhausted" and "--max-restarts 0" in snap["error"]
    assert not processes_of_run_root(run_root)


def test_watchdog_dumps_stacks_of_a_hung_worker_then_fails_the_group(kernel, run_root):
    # 15 s: the stall clock starts at the launch, and a loaded machine (CI's three lanes on two cores) took over 8 s
    # for a forked worker's start-up, so its dump showed nbworkers' start-up, not the user's function
    cell = """%%worker -n 2 --name hung --stall-timeout 15 --max-restarts 0
import time
def wait_for_a_peer_that_never_comes():
    time.sleep(600)
print("about to hang", flush=True)
wait_for_a_peer_that_never_comes()
"""
    assert not kernel.run(cell).error
    assert_wait_raises_run_failed(kernel, "hung", 90, "no worker reported progress for 15 s")
    snap = kernel.value("nbworkers.get_cluster('hung').snapshot()")
    assert snap["status"] == "failed", snap
    assert "no worker reported progress for 15 s" in snap["error"]
    for i in (0, 1):
        log = (run_root / "hung" / f"worker-{i}.log").read_text()
        assert "wait_for_a_peer_that_never_comes" in log and "cell.py" in log, log
    assert not processes_of_run_root(run_root)


def test_restart_button_restarts_the_group(kernel, run_root):
    assert not kernel.run(KILLABLE_CELL.format(name="again", flags="")).error
    assert wait_until(lambda: worker_pid(kernel, "again", 1) is not None, 60)
    assert not kernel.run("nbworkers.get_cluster('again').restart()").error
    assert not kernel.run("%workers wait again --timeout 120").error
    snap = kernel.value("nbworkers.get_cluster('again').snapshot()")
    assert snap["status"] == "finished" and snap["restart_history"][0]["kind"] == "UserRestart"


def test_restart_after_the_end_runs_the_cell_again(kernel, run_root):
    cell = """%%worker -n 2 --block --name twice
print("ran", flush=True)
"""
    assert not kernel.run(cell).error
    assert not kernel.run("nbworkers.get_cluster('twice').restart()").error
    assert not kernel.run("%workers wait twice --timeout 60").error
    assert kernel.value("nbworkers.get_cluster('twice').status") == "finished"
    assert "[1] ran" in kernel.run("%workers logs twice").stdout
