"""The detached run's supervisor process (magics/run/detach/supervisor.py), its logic with a fake loop: it answers the kernel
once (started, refused, failed), waits for the run's end, marks the loop detached; the kernel's side
(magics/run/detach/start.py) reads those answers, with a fake process in place of the real one; an attached handle
restarts a detached run through its request file, and only a detached one."""

from __future__ import annotations

import io
import json
import os
import pickle
import threading
import time
from pathlib import Path

import pytest

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.notebook.remote.attach import AttachedCluster, DetachedCluster, attach
from nbworkers.magics.run.detach import start as detach_start
from nbworkers.magics.run.detach.supervisor import DetachRequest, serve, settings_values
from nbworkers.magics.rundir.layout import restart_requested, write_state
from nbworkers.magics.rundir.listing import describe
from nbworkers.magics.settings import WorkerSettings


class FakeLoop:
    def __init__(self, run_dir: Path, fail: BaseException | None = None):
        self.run_dir, self.fail = run_dir, fail
        self.detached = False
        self.stop_event = threading.Event()
        self.done = threading.Event()
        self.started = False

    def start(self) -> None:
        if self.fail is not None:
            raise self.fail
        self.started = True


def _request() -> DetachRequest:
    return DetachRequest(LaunchSpec(code="print(1)\n", workers=1, name="d1"), settings_values(WorkerSettings()))


def test_started_run_is_answered_then_waited_for(tmp_path):
    loop, answer = FakeLoop(tmp_path), io.StringIO()
    threading.Timer(0.2, loop.done.set).start()  # the run ends
    quieted: list = []  # after the answer: its outputs away from the kernel's pipe
    code = serve(_request(), lambda request: loop, answer, on_started=quieted.append)
    assert code == 0 and loop.started and loop.detached and quieted == [loop]
    data = json.loads(answer.getvalue())
    assert data["ok"] is True and data["run_dir"] == str(tmp_path)


def test_refused_launch_is_a_launch_error_answer(tmp_path):
    answer = io.StringIO()
    code = serve(_request(), lambda request: FakeLoop(tmp_path, LaunchError("-n 0: no")), answer)
    data = json.loads(answer.getvalue())
    assert code == 2 and data == {"ok": False, "launch_error": True, "error": "-n 0: no"}


def test_crash_is_answered_with_its_traceback(tmp_path):
    answer = io.StringIO()
    code = serve(_request(), lambda request: FakeLoop(tmp_path, RuntimeError("boom")), answer)
    data = json.loads(answer.getvalue())
    assert code == 1 and not data["launch_error"] and "RuntimeError: boom" in data["error"]


def test_settings_survive_the_trip():
    config = WorkerSettings(stop_grace=7.5, detach=True)
    again = WorkerSettings(**settings_values(config))
    assert again.stop_grace == 7.5 and again.detach is True


class FakeSupervisor:
    """Stands in for the supervisor process: what it answers on its stdout, what the kernel wrote it."""

    answer = b""

    def __init__(self, command, **options):
        self.command, self.options = command, options
        self.stdin = io.BytesIO()
        self.stdin.close = lambda: None  # keep what was written readable
        self.stdout = io.BytesIO(self.answer)
        self.returncode = None

    def poll(self):
        return self.returncode

    def wait(self):
        self.returncode = 3
        return 3


def _spawn(answer: dict | None, seen: list):
    class Answering(FakeSupervisor):
        pass

    Answering.answer = (json.dumps(answer) + "\n").encode() if answer is not None else b""

    def spawn(command, **options):
        seen.append(Answering(command, **options))
        return seen[-1]

    return spawn


@pytest.mark.parametrize(("answer", "error"), [
    ({"ok": False, "launch_error": True, "error": "refused: why"}, LaunchError),
    ({"ok": False, "launch_error": False, "error": "Traceback..."}, detach_start.DetachFailed),
    (None, detach_start.DetachFailed),  # it died before answering
])
def test_kernel_side_reads_refusals_and_crashes(answer, error):
    with pytest.raises(error):
        detach_start.start_detached(_request().spec, WorkerSettings(), spawn=_spawn(answer, []))


def test_kernel_side_starts_its_own_session_and_returns_the_run_dir(tmp_path):
    seen: list = []
    run_dir = detach_start.start_detached(_request().spec, WorkerSettings(run_root=str(tmp_path)),
                                          spawn=_spawn({"ok": True, "run_dir": "/x/d1", "pid": 1}, seen))
    process = seen[0]
    assert run_dir == Path("/x/d1")
    assert process.command[1:] == ["-m", "nbworkers.magics.run.detach.supervisor"]
    assert process.options["start_new_session"] is True  # a kernel restart's signal to its group does not reach it
    assert process.options["env"]["NBWORKERS_RUN_DIR"] == str(tmp_path / "d1")  # procs/strays.py finds it
    request = pickle.loads(process.stdin.getvalue())
    assert request.spec.name == "d1" and request.settings["run_root"] == str(tmp_path)


def _state(run_dir: Path, **fields) -> None:
    run_dir.mkdir(parents=True)
    write_state(run_dir, {"status": "running", "kernel_pid": os.getpid(), "started": time.time(), "workers": [],
                          **fields})


def test_an_attached_detached_run_can_be_restarted(tmp_path):
    _state(tmp_path / "far", detached=True)
    cluster = AttachedCluster(tmp_path / "far")
    assert cluster.detached and cluster.status == "running"
    cluster.restart()
    assert restart_requested(tmp_path / "far")


def test_an_attached_ordinary_run_stays_read_only(tmp_path):
    _state(tmp_path / "near")
    with pytest.raises(RuntimeError, match="read-only"):
        AttachedCluster(tmp_path / "near").restart()
    assert not restart_requested(tmp_path / "near")


def test_ray_runs_and_sessions_detach_an_unknown_backend_is_refused_before_anything_starts():
    seen: list = []
    for module in ("nbworkers.magics.run.detach.supervisor", "nbworkers.magics.sessions.detach.supervisor"):
        spec = LaunchSpec(code="print(1)\n", workers=1, name="d2", backend="ray")
        detach_start.start_detached(spec, WorkerSettings(), spawn=_spawn({"ok": True, "run_dir": "/x/d2"}, seen),
                                    module=module)
    assert len(seen) == 2  # its supervisor process is the Ray driver: the actors die with it
    with pytest.raises(LaunchError, match="--detach: not with --backend k8s"):
        detach_start.start_detached(LaunchSpec(code="print(1)\n", workers=1, name="d3", backend="k8s"),
                                    WorkerSettings(), spawn=_spawn({"ok": True}, seen))
    assert len(seen) == 2


def test_a_detached_runs_handle_gathers_the_charts_history(tmp_path):
    def write(step, loss):
        write_state(tmp_path / "far", {"status": "running", "kernel_pid": os.getpid(), "started": time.time(),
                                       "detached": True, "workers": [
                                           {"index": 0, "status": "running", "step": step, "metrics": {"loss": loss}}]})

    _state(tmp_path / "far", detached=True)
    cluster = attach("far", tmp_path)
    assert isinstance(cluster, DetachedCluster)
    write(1, 0.5)
    cluster.snapshot()
    write(2, "nan")  # state.json's strict JSON for a NaN loss
    cluster.snapshot()
    history = cluster.snapshot()["workers"][0]["history"]  # the same picture again adds no point
    assert [step for step, _ in history] == [1, 2] and history[0][1] == (("loss", 0.5),)


def test_pushed_values_travel_as_the_kernels_bytes():
    """--push: the supervisor gets the names and the kernel's pickle, which it never unpickles (a class defined in
    the notebook could not be); the loop signs those bytes for the workers as it signs its own."""
    seen: list = []
    spec = LaunchSpec(code="print(1)\n", workers=1, name="d3", push={"weights": [1, 2]})
    detach_start.start_detached(spec, WorkerSettings(), spawn=_spawn({"ok": True, "run_dir": "/x/d3"}, seen))
    request = pickle.loads(seen[0].stdin.getvalue())
    assert request.spec.push == {"weights": None} and pickle.loads(request.push) == {"weights": [1, 2]}


def test_the_listing_shows_a_detached_run_as_running_while_its_supervisor_lives(tmp_path):
    """The REST API's and sidebar's row: a detached run's kernel_pid is its supervisor process's (here this one's),
    so it is running, not lost, whatever became of the kernel that started it."""
    _state(tmp_path / "far", detached=True)
    row = describe(tmp_path / "far")
    assert row is not None and row["detached"] is True and row["status"] == "running" and row["kernel_alive"]
