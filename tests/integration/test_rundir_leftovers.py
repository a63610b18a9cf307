"""Leftovers of dead kernels: found, reaped (real processes killed, state rewritten), attached read-only; runs of
live kernels, of other machines and processes that merely reuse a pid or group id are never touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import ended

from nbworkers.kernel_driver import KernelDriver, wait_until
from nbworkers.magics.notebook.remote import attach
from nbworkers.magics.rundir import layout as rundir
from nbworkers.magics.rundir import leftovers, liveness
from nbworkers.magics.rundir import listing as run_listing
from nbworkers.procs.ownership import started_since_boot
from nbworkers.procs.strays import kill_strays
from nbworkers.protocol.statuses import KERNEL_GONE

PY = sys.executable
TEST_RUN_ID = "run-of-the-tests"  # NBWORKERS_RUN_ID: the marker every process of a run carries (ownership.py)
STOP_TIMEOUT = 30
KERNEL_READY_TIMEOUT = 90
CLUSTER_UP_TIMEOUT = 90


def stubborn(env: dict[str, str] | None = None) -> subprocess.Popen:
    """A process in a session (and process group) of its own that ignores SIGTERM."""
    proc = subprocess.Popen(
        [PY, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True);"
                   " time.sleep(600)"],
        stdout=subprocess.PIPE, start_new_session=True,
        env={**os.environ, "NBWORKERS_RUN_ID": TEST_RUN_ID, **(env or {})},
    )
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def gone(proc: subprocess.Popen) -> bool:
    """The process has exited (psutil may have reaped our child already, so Popen's code is not reliable)."""
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        try:
            if proc.poll() is not None or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def dead_pid() -> int:
    proc = subprocess.Popen([PY, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_run(run_root: Path, name: str, kernel_pid: int, procs: list[subprocess.Popen], started: float,
              status: str = "running", record_offset: float = 0.0, **extra) -> Path:
    """A run directory as a kernel leaves it: the first half of procs are hosts, the rest workers; every one's
    (pid, create time) recorded (``record_offset`` moves the recorded times: a stale record)."""
    half = len(procs) // 2
    hosts, workers = procs[:half], procs[half:]
    run_dir = run_root / name
    run_dir.mkdir(parents=True)
    state = {
        "name": name, "backend": "local", "status": status, "error": "", "started": started, "ended": None,
        "wall_time": 1.0, "restarts": 0, "restart_causes": [], "generation": 0, "run_dir": str(run_dir),
        "dropped": {}, "kernel_pid": kernel_pid, "kernel_id": "k-1", "run_id": TEST_RUN_ID,
        "workers": [{"index": i, "role": "worker", "role_index": i, "host": "", "pid": pid, "status": "running",
                     "detail": "", "exit_code": None, "epoch": 1, "epochs_total": 3, "step": 5, "steps_total": 10,
                     "metrics": {"loss": 0.25}, "steps_per_sec": 2.0, "restarts": 0,
                     "log_path": str(run_dir / f"worker-{i}.log"), "log_tail": []}
                    for i, pid in enumerate([w.pid for w in workers] or [None, None])],
        "host_pids": [h.pid for h in hosts], "worker_pgids": [w.pid for w in workers],
        "processes": [[p.pid, started_since_boot(p.pid) + record_offset] for p in procs],
        **extra,
    }
    for worker in state["workers"]:
        Path(worker["log_path"]).write_text(f"first line of {worker['index']}\nlast line of {worker['index']}\n")
    (run_dir / "state.json").write_text(json.dumps(state))
    return run_dir


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []

    def make(n: int, env: dict[str, str] | None = None) -> list[subprocess.Popen]:
        new = [stubborn(env) for _ in range(n)]
        started.extend(new)
        return new

    yield make
    for proc in started:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path


def test_a_dead_kernels_run_is_found_and_reaped(root, procs):
    started = time.time() - 0.5
    group = procs(4)
    run_dir = write_run(root, "left-behind", dead_pid(), group, started)
    write_run(root, "finished-run", dead_pid(), [], started, status="finished")

    assert leftovers.find_leftovers(root) == [run_dir]
    row = {r["name"]: r for r in run_listing.list_runs(root)}["left-behind"]
    assert row["status"] == liveness.LOST and row["processes_alive"] == 4 and row["recorded_status"] == "running"

    assert leftovers.reap_leftovers(root, kill_grace=1.0) == ["left-behind"]
    assert all(gone(p) for p in group)  # they ignore SIGTERM: SIGKILL followed
    state = json.loads((run_dir / "state.json").read_text())
    assert state["status"] == "stopped" and state["error"] == KERNEL_GONE  # one status: what every view shows
    assert state["ended"] and state["reaped"]
    assert [w["status"] for w in state["workers"]] == ["stopped", "stopped"]
    assert leftovers.find_leftovers(root) == []
    assert json.loads((root / "finished-run" / "state.json").read_text())["status"] == "finished"


def test_a_marker_alone_or_a_stale_record_is_not_a_leftover(root, procs):
    """Only processes whose (pid, create time) the run's kernel recorded are its leftovers: a process carrying the
    run's id and naming its directory but never recorded is not (a marker proves nothing)."""
    started = time.time() - 0.5
    recorded = procs(2)
    unrecorded = procs(1, env={"NBWORKERS_RUN_DIR": str(root / "half-started")})
    run_dir = write_run(root, "half-started", dead_pid(), recorded, started)
    found = {p.pid for p in liveness.leftover_processes(rundir.read_state(run_dir), run_dir)}
    assert found == {p.pid for p in recorded}
    leftovers.reap(run_dir, kill_grace=0.5)
    assert all(gone(p) for p in recorded)
    assert unrecorded[0].poll() is None


def test_runs_of_a_live_kernel_are_left_alone(root, procs):
    group = procs(2)
    # this test process plays the kernel: alive, started before the run
    run_dir = write_run(root, "alive", os.getpid(), group, time.time())
    assert liveness.kernel_alive(json.loads((run_dir / "state.json").read_text()))
    assert leftovers.find_leftovers(root) == []
    assert leftovers.reap(run_dir)["status"] == "running"
    assert all(p.poll() is None for p in group)
    assert run_listing.list_runs(root)[0]["status"] == "running"


def test_a_pid_reused_after_the_run_started_is_not_its_kernel(root, procs):
    started = time.time() - 10
    [impostor] = procs(1)  # a process created after the run started, holding "the kernel's" pid
    state = {"status": "running", "started": started, "kernel_pid": impostor.pid}
    assert not liveness.kernel_alive(state)
    assert liveness.kernel_alive({**state, "started": time.time()})


def test_processes_newer_than_the_record_are_spared(root, procs):
    """A pid reused by a process started after the kernel recorded the pid's first owner is not the run's."""
    group = procs(2)
    run_dir = write_run(root, "old-run", dead_pid(), group, started=time.time() - 100, record_offset=-90)
    state = rundir.read_state(run_dir)
    assert liveness.leftover_processes(state, run_dir) == []
    leftovers.reap(run_dir, kill_grace=0.5)
    assert all(p.poll() is None for p in group)
    assert rundir.read_state(run_dir)["status"] == "stopped"


def test_runs_of_another_machine_are_never_reaped(root, procs):
    group = procs(2)
    run_dir = write_run(root, "remote", dead_pid(), group, time.time(), hostname="some-other-machine")
    assert leftovers.find_leftovers(root) == []
    assert leftovers.reap_leftovers(root) == []
    assert rundir.read_state(run_dir)["status"] == "running"
    assert all(p.poll() is None for p in group)


def test_scan_at_load_reaps_in_the_background(root, procs):
    started = time.time()  # before the processes: a run's processes are younger than the run
    group = procs(2)
    run_dir = write_run(root, "stale", dead_pid(), group, started)
    thread = leftovers.scan_at_load(root)
    thread.join(STOP_TIMEOUT)
    assert not thread.is_alive()
    assert rundir.read_state(run_dir)["status"] == "stopped"
    assert all(gone(p) for p in group)


def test_attach_is_read_only_and_can_stop(root, procs):
    started = time.time()
    group = procs(4)
    write_run(root, "orphan", dead_pid(), group, started)
    cluster = attach.attach("orphan", root)
    assert cluster.name == "orphan" and cluster.status == liveness.LOST and not cluster.done
    snapshot = cluster.snapshot()
    assert snapshot["attached"] and [w["metrics"] for w in snapshot["workers"]] == [{"loss": 0.25}] * 2
    assert cluster.logs(1, tail=1) == "last line of 1"
    assert cluster.logs(tail=1) == "[0] last line of 0\n[1] last line of 1"
    with pytest.raises(ValueError):
        cluster.logs(5)
    with pytest.raises(RuntimeError, match="read-only"):
        cluster.restart()
    cluster.stop()
    assert cluster.wait(timeout=STOP_TIMEOUT)
    assert cluster.status == "stopped" and cluster.done
    assert all(gone(p) for p in group)

    for bad in ("..", "../runs", "/etc", "no-such-run", ".hidden", ""):
        with pytest.raises(rundir.RunNotFound):
            attach.attach(bad, root)


def test_a_symlink_out_of_the_run_root_is_not_a_run(root, tmp_path):
    outside = tmp_path / "outside"
    write_run(tmp_path, "outside", dead_pid(), [], time.time())
    (root / "sneaky").symlink_to(outside, target_is_directory=True)
    assert rundir.list_run_dirs(root) == []
    with pytest.raises(rundir.RunNotFound):
        attach.attach("sneaky", root)
    assert leftovers.reap_leftovers(root) == []
    assert rundir.read_state(outside)["status"] == "running"


# ------------------------------------------------------------------------------------ a real kernel, killed
class NbworkersKernel(KernelDriver):
    """nbworkers' own kernel, from the kernelspec installed under ``prefix`` (nbworkers.kernel_driver)."""

    def __init__(self, prefix: Path, env: dict[str, str], cwd: Path):
        super().__init__(cwd, env, kernel_name="nbworkers", kernel_dirs=[str(prefix / "share/jupyter/kernels")],
                         ready_timeout=KERNEL_READY_TIMEOUT)

    def run_text(self, code: str, timeout: float = 120) -> tuple[str, str]:
        """(stdout and the text of what it displayed, "ename: evalue" when it raised)."""
        result = self.run(code, timeout)
        return result.stdout + "".join(d.get("text/plain", "") + "\n" for d in result.displays), result.error_line

    def kill(self) -> None:
        try:
            self.client.stop_channels()
        except Exception:
            pass
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.manager.shutdown_kernel(now=True)
        except Exception:
            pass




def test_a_new_kernel_reaps_and_attaches_what_a_killed_kernel_left(tmp_path):
    prefix, run_root, cwd = tmp_path / "prefix", tmp_path / "runs", tmp_path / "nb"
    cwd.mkdir()
    env = dict(os.environ, NBWORKERS_RUN_ROOT=str(run_root), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    env.pop("TF_CONFIG", None)
    installed = subprocess.run([PY, "-m", "nbworkers.kernelspec", "install", "--prefix", str(prefix)],
                               capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr
    first = second = None
    try:
        first = NbworkersKernel(prefix, env, cwd)
        out, error = first.run_text("%%worker -n 2 --name doomed\nimport time\nprint('worker up', flush=True)\n"
                               "time.sleep(60)\n")
        assert not error, error
        state_file = run_root / "doomed" / "state.json"

        def up():
            try:
                state = json.loads(state_file.read_text())
            except (OSError, ValueError):
                return None
            return state if [w["status"] for w in state["workers"]] == ["running", "running"] else None

        state = wait_until(up, CLUSTER_UP_TIMEOUT, 0.2)
        assert state, (run_root / "doomed" / "worker-0.log").read_text()
        os.kill(first.pid, signal.SIGKILL)
        first.manager.provisioner.process.wait()

        second = NbworkersKernel(prefix, env, cwd)
        out, error = second.run_text(
            # the kernel's scan at load (``leftovers.scan_at_load``) reaps it: nothing else does
            "import time\n"
            "from nbworkers.magics.notebook.remote import attach\nfrom nbworkers.magics.rundir import leftovers, layout as rundir\n"
            "deadline = time.monotonic() + 30\n"
            "while leftovers.find_leftovers() and time.monotonic() < deadline:\n"
            "    time.sleep(0.1)\n"
            "print(sorted(p.name for p in leftovers.find_leftovers()))\n"
            "print('reaped' in rundir.read_state(rundir.run_dir_of('doomed')))\n"
            "attached = attach.workers_attach('doomed')\n"
            "print(attached.status, attached.done)\n")
        assert not error, error
        assert out.split() == ["[]", "True", "stopped", "True"], out
        # the attached run works with %workers like one of the kernel's own
        out, error = second.run_text("%workers logs doomed -w 1 --tail 2")  # (the last: the stop's own line)
        assert not error and out.strip().splitlines()[0] == "worker up", (out, error)
        assert out.strip().splitlines()[-1].startswith("--- nbworkers: stopped"), (out, error)
        out, error = second.run_text("%workers")
        assert not error and "doomed" in out and "stopped" in out, (out, error)
        out, error = second.run_text("%workers wait doomed --timeout 10")
        # stopped because its kernel died: not a failure (no RunFailed); the cause and what to do are shown
        assert KERNEL_GONE in out and not error, (out, error)
        assert wait_until(lambda: all(ended(p) for p in state["host_pids"]), STOP_TIMEOUT)
    finally:
        for kernel in (first, second):
            if kernel is not None:
                kernel.kill()
        kill_strays(run_root)
