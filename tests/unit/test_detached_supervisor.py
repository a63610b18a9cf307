"""The detached run's supervisor process (magics/run/detach/supervisor.py), its logic with a fake loop: it answers the kernel
once (started, refused, failed), waits for the run's end, marks the loop detached; the kernel's side
(magics/run/detach/start.py) reads those answers, with a fake process in place of the real one; an attached handle
restarts a detached run through its request file, and only a detached one."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import threading
import time
from pathlib import Path

import pytest

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.notebook.remote.attach import AttachedCluster, DetachedCluster, attach
from nbworkers.magics.run.detach import start as detach_start
from nbworkers.magics.run.detach import start_log
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

    def stop(self) -> None:
        self.stop_event.set()

    def wait_done(self, timeout: float) -> bool:
        return self.done.wait(timeout)


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
    """Stands in for the supervisor process: what it answers on its stdout, what the kernel wrote it, what it
    writes to its stderr (the file the kernel gave it)."""

    answer = b""
    stderr = b""

    def __init__(self, command, **options):
        self.command, self.options = command, options
        self.folder = Path(options["cwd"])
        self.log_mode = os.fstat(options["stderr"]).st_mode
        os.write(options["stderr"], self.stderr)
        self.stdin = io.BytesIO()
        self.stdin.close = lambda: None  # keep what was written readable
        self.stdout = io.BytesIO(self.answer)
        self.returncode = None

    def poll(self):
        return self.returncode

    def wait(self):
        self.returncode = 3
        return 3


def _spawn(answer: dict | None, seen: list, stderr: bytes = b""):
    class Answering(FakeSupervisor):
        pass

    Answering.answer = (json.dumps(answer) + "\n").encode() if answer is not None else b""
    Answering.stderr = stderr

    def spawn(command, **options):
        seen.append(Answering(command, **options))
        return seen[-1]

    return spawn


@pytest.mark.parametrize(("answer", "error"), [
    ({"ok": False, "launch_error": True, "error": "refused: why"}, LaunchError),
    ({"ok": False, "launch_error": False, "error": "Traceback..."}, detach_start.DetachFailed),
    (None, detach_start.DetachFailed),  # it died before answering
])
def test_kernel_side_reads_refusals_and_crashes(answer, error, runtime):
    with pytest.raises(error):
        detach_start.start_detached(_request().spec, WorkerSettings(), spawn=_spawn(answer, []))


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    """A private runtime directory of the test's own (the supervisors' start folders are made in it)."""
    base = tmp_path / "runtime"
    base.mkdir(mode=0o700)
    monkeypatch.setenv("NBWORKERS_RUNTIME_DIR", str(base))
    return base / f"nbworkers-detach-{os.getuid()}"


@pytest.mark.parametrize("answer", [None, {"ok": False, "launch_error": False, "error": "Traceback: boom"}])
def test_a_start_failure_points_to_the_supervisors_stderr_and_quotes_its_end(answer, runtime):
    """Its stderr is a 0600 file in a private start folder from its first instruction on: the cell's error names it
    and shows its last lines, and it stays there to be read."""
    seen: list = []
    printed = b"".join(b"line %d\n" % i for i in range(30)) + b"ImportError: cannot import name 'x'\n"
    with pytest.raises(detach_start.DetachFailed) as failed:
        detach_start.start_detached(_request().spec, WorkerSettings(), spawn=_spawn(answer, seen, printed))
    log = seen[0].folder / "supervisor.log"
    message = str(failed.value)
    assert f"The end of what it wrote to stderr ({log}):" in message and "ImportError: cannot import name" in message
    assert "line 29" in message and "line 5\n" not in message  # its end, not all of it
    assert log.read_bytes() == printed and oct(log.stat().st_mode & 0o777) == "0o600"
    assert seen[0].folder.parent == runtime and oct(seen[0].folder.stat().st_mode & 0o777) == "0o700"


def test_a_start_failure_that_printed_nothing_says_so(runtime):
    seen: list = []
    with pytest.raises(detach_start.DetachFailed, match=r"exit code 3\)\. It wrote nothing to stderr \(.*supervisor"):
        detach_start.start_detached(_request().spec, WorkerSettings(), spawn=_spawn(None, seen))


def test_a_refused_launch_leaves_no_start_folder(runtime):
    seen: list = []
    with pytest.raises(LaunchError):
        detach_start.start_detached(_request().spec, WorkerSettings(),
                                    spawn=_spawn({"ok": False, "launch_error": True, "error": "no"}, seen))
    assert not seen[0].folder.exists() and runtime.is_dir()


def test_the_supervisor_moves_its_stderr_and_working_directory_to_its_run_directory(tmp_path, monkeypatch):
    """``start_log.adopt``: the run directory's supervisor.log (0600) gets what the start log held, then every later
    line; the start folder goes; a symlink planted as the log is not followed."""
    folder, run_dir = tmp_path / "start", tmp_path / "run"
    folder.mkdir(mode=0o700)
    run_dir.mkdir(mode=0o700)
    (folder / "supervisor.log").write_bytes(b"early line\n")
    saved, cwd = os.dup(2), os.getcwd()
    try:
        start_log.adopt(str(folder), run_dir)
        os.write(2, b"later line\n")
        moved_to = os.getcwd()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.chdir(cwd)
    log = run_dir / "supervisor.log"
    assert log.read_bytes() == b"early line\nlater line\n" and oct(log.stat().st_mode & 0o777) == "0o600"
    assert moved_to == str(run_dir) and not folder.exists()
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (other / "supervisor.log").symlink_to(tmp_path / "target")
    with pytest.raises(OSError):
        start_log.adopt("", other)
    assert not (tmp_path / "target").exists()


def test_kernel_side_starts_its_own_session_and_returns_the_run_dir(tmp_path, runtime):
    seen: list = []
    run_dir = detach_start.start_detached(_request().spec, WorkerSettings(run_root=str(tmp_path)),
                                          spawn=_spawn({"ok": True, "run_dir": "/x/d1", "pid": 1}, seen))
    process = seen[0]
    assert run_dir == Path("/x/d1")
    assert process.command[1:] == ["-P", "-m", "nbworkers.magics.run.detach.supervisor"]  # no cwd on sys.path
    # it runs in a private folder of its own, not the notebook's; its stderr a 0600 file there
    assert process.folder.parent == runtime and oct(process.folder.stat().st_mode & 0o777) == "0o700"
    assert oct(process.log_mode & 0o777) == "0o600" and process.options["stderr"] not in (None, subprocess.DEVNULL)
    assert process.options["start_new_session"] is True  # a kernel restart's signal to its group does not reach it
    assert process.options["env"]["NBWORKERS_RUN_DIR"] == str(tmp_path / "d1")  # procs/strays.py finds it
    request = pickle.loads(process.stdin.getvalue())
    assert request.spec.name == "d1" and request.settings["run_root"] == str(tmp_path)
    assert request.start_dir == str(process.folder) and request.spec.cwd == _request().spec.cwd  # the cell's folder


def test_a_relative_run_root_reaches_the_supervisor_absolute(tmp_path, runtime, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen: list = []
    detach_start.start_detached(_request().spec, WorkerSettings(run_root="runs"),
                                spawn=_spawn({"ok": True, "run_dir": "/x/d1", "pid": 1}, seen))
    assert pickle.loads(seen[0].stdin.getvalue()).settings["run_root"] == str(tmp_path / "runs")


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


def test_ray_runs_and_sessions_detach_an_unknown_backend_is_refused_before_anything_starts(runtime):
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


def test_pushed_values_travel_as_the_kernels_bytes(runtime):
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
