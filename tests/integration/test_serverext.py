"""The nbworkers REST API against a real `jupyter server` (a subprocess on a free port, with a token), with
real kernels started through the server's own /api/kernels and driven over their websocket."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import ended

from nbworkers.kernel_driver import wait_until
from nbworkers.magics.rundir import leftovers
from nbworkers.magics.rundir.liveness import LOST
from nbworkers.procs.ownership import started_since_boot
from nbworkers.protocol.statuses import KERNEL_GONE

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
TOKEN = "nbworkers-test-" + uuid.uuid4().hex
SERVER_START_TIMEOUT = 60  # seconds for `jupyter server` to answer
KERNEL_START_TIMEOUT = 90
CLUSTER_UP_TIMEOUT = 90  # seconds for 2 workers to report running
STOP_TIMEOUT = 30
HTTP_TIMEOUT = 60
TENSORBOARD_UP_TIMEOUT = 120  # s: TensorBoard imports TensorFlow on 2 shared cores
WORKER_CELL = "import time\nprint('worker up', flush=True)\ntime.sleep(60)\n"


@dataclass
class Server:
    port: int
    proc: subprocess.Popen
    run_root: Path
    root_dir: Path
    log: Path

    def request(self, method: str, path: str, token: str | None = TOKEN, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
        """One raw HTTP request: the path goes out exactly as given (no client-side normalisation)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT)
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"token {token}"
        try:
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            return response.status, response.read(), dict(response.getheaders())
        finally:
            conn.close()

    def json(self, method: str, path: str, **kwargs) -> tuple[int, object]:
        status, body, _ = self.request(method, path, **kwargs)
        try:
            return status, json.loads(body or b"null")
        except ValueError:
            return status, body.decode(errors="replace")




def _kill_tree(root_pid: int, run_root: Path) -> None:
    """SIGKILL the process groups of root_pid's descendants, of every process of a run under run_root, and root's."""
    groups: set[int] = set()
    try:
        for child in psutil.Process(root_pid).children(recursive=True):
            try:
                groups.add(os.getpgid(child.pid))
            except OSError:
                pass
    except psutil.Error:
        pass
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid != os.getpid() and proc.environ().get("NBWORKERS_RUN_DIR", "").startswith(str(run_root)):
                groups.add(os.getpgid(proc.pid))
        except (psutil.Error, OSError):
            continue
    groups.add(root_pid)
    groups.discard(os.getpgid(0))
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("nbw-server")
    prefix, run_root, root_dir = base / "prefix", base / "runs", base / "notebooks"
    run_root.mkdir()
    root_dir.mkdir()
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.pop("JUPYTER_PATH", None)
    env.update({
        "JUPYTER_CONFIG_DIR": str(base / "jupyter-config-dir"),
        "JUPYTER_DATA_DIR": str(base / "jupyter-data"),
        "JUPYTER_RUNTIME_DIR": str(base / "jupyter-runtime"),
        "JUPYTER_PLATFORM_DIRS": "1",
        # the project's own config file is what enables the server extension
        "JUPYTER_CONFIG_PATH": str(REPO / "jupyter-config"),
        "JUPYTER_PATH": str(prefix / "share" / "jupyter"),
        "NBWORKERS_RUN_ROOT": str(run_root),
        "TF_CPP_MIN_LOG_LEVEL": "1",
    })
    installed = subprocess.run([PY, "-m", "nbworkers.kernelspec", "install", "--prefix", str(prefix)],
                               capture_output=True, text=True, env=env, timeout=120)
    assert installed.returncode == 0, installed.stderr
    log = base / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [PY, "-m", "jupyter_server", "--no-browser", "--allow-root", "--ServerApp.port=0",
             "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root_dir}"],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root_dir, start_new_session=True,
        )
    try:
        info_file = Path(env["JUPYTER_RUNTIME_DIR"]) / f"jpserver-{proc.pid}.json"
        # the server writes its runtime file in place: it can be there and still empty (seen in CI under load)
        assert wait_until(lambda: _port(info_file) or proc.poll() is not None, SERVER_START_TIMEOUT), log.read_text()
        assert proc.poll() is None, log.read_text()
        port = _port(info_file)
        srv = Server(port=port, proc=proc, run_root=run_root, root_dir=root_dir, log=log)
        assert wait_until(lambda: _answers(srv), SERVER_START_TIMEOUT), log.read_text()
        yield srv
    finally:
        _kill_tree(proc.pid, run_root)
        proc.wait(timeout=30)


def _port(info_file: Path) -> int | None:
    """The port in the server's runtime file, once the file is there and whole."""
    try:
        return json.loads(info_file.read_text())["port"]
    except (OSError, ValueError, KeyError):
        return None


def _answers(srv) -> bool:
    """The server answers /api/status (its runtime file may be written before it listens: refused until then)."""
    try:
        return srv.request("GET", "/api/status")[0] == 200
    except ConnectionRefusedError:
        return False


class KernelSession:
    """A kernel started through the server's REST API, cells sent over its websocket."""

    def __init__(self, server: Server, kernel_name: str = "nbworkers"):
        import websocket

        self.server = server
        status, data = server.json("POST", "/api/kernels", body=json.dumps({"name": kernel_name}).encode())
        assert status == 201, data
        self.id = data["id"]
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{server.port}/api/kernels/{self.id}/channels",
            header=[f"Authorization: token {TOKEN}"], timeout=KERNEL_START_TIMEOUT,
        )
        self.session = uuid.uuid4().hex
        out, error = self.run("import os; print(os.getpid())", timeout=KERNEL_START_TIMEOUT)
        assert not error, error
        self.pid = int(out.strip())

    def send(self, code: str) -> str:
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "username": "test", "session": self.session, "msg_type": "execute_request",
                       "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True},
        }))
        return msg_id

    def run(self, code: str, timeout: float = 120) -> tuple[str, str]:
        """(stdout, error) of one cell, once the kernel is idle again."""
        import websocket

        msg_id = self.send(code)
        out, error = "", ""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                msg = json.loads(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                break
            if msg.get("parent_header", {}).get("msg_id") != msg_id or msg.get("channel") != "iopub":
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out += content["text"]
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif kind == "status" and content["execution_state"] == "idle":
                return out, error
        raise TimeoutError(f"cell did not finish in {timeout} s: {code}")

    def execution_state(self) -> str:
        status, data = self.server.json("GET", f"/api/kernels/{self.id}")
        return data.get("execution_state", "") if status == 200 else f"http {status}"

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass
        self.server.request("POST", f"/api/kernels/{self.id}/interrupt")
        self.server.request("DELETE", f"/api/kernels/{self.id}")
        if psutil.pid_exists(self.pid):
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _state(server: Server, name: str) -> dict:
    return json.loads((server.run_root / name / "state.json").read_text())


def _start_sleeping_cluster(kernel: KernelSession, name: str) -> dict:
    out, error = kernel.run(f"%%worker -n 2 --name {name}\n{WORKER_CELL}")
    assert not error, error

    def up():
        try:
            state = _state(kernel.server, name)
        except (OSError, ValueError):
            return None
        logs_ok = all("worker up" in (kernel.server.run_root / name / f"worker-{i}.log").read_text() for i in (0, 1))
        running = [w["status"] for w in state["workers"]] == ["running", "running"] and len(state["worker_pgids"]) == 2
        return state if (logs_ok and running) else None

    state = wait_until(up, CLUSTER_UP_TIMEOUT, 0.2)
    assert state, (kernel.server.run_root / name / "worker-0.log").read_text()
    return state


def _pids_of(state: dict) -> list[int]:
    return list(state["host_pids"]) + [w["pid"] for w in state["workers"] if w.get("pid")]


def _none_alive(pids: list[int]) -> bool:
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


@pytest.fixture(scope="module")
def busy_cluster(server):
    """A 2-worker cluster sleeping in its cell, started from a kernel that is itself busy in time.sleep."""
    kernel = KernelSession(server)
    try:
        state = _start_sleeping_cluster(kernel, "sleepy")
        kernel.send("import time; time.sleep(60)")
        assert wait_until(lambda: kernel.execution_state() == "busy", 30), kernel.execution_state()
        yield kernel, state
    finally:
        kernel.close()


# --------------------------------------------------------------------------------------------------- reading
def test_list_shows_the_running_cluster(server, busy_cluster):
    kernel, _ = busy_cluster
    status, data = server.json("GET", "/nbworkers/api/clusters")
    assert status == 200, data
    assert data["run_root"] == str(server.run_root)
    [row] = [c for c in data["clusters"] if c["name"] == "sleepy"]
    assert row["status"] == "running" and row["kernel_alive"] is True
    assert row["kernel"] == {"id": kernel.id, "pid": kernel.pid}
    assert row["backend"] == "local" and row["workers"] == 2 and row["restarts"] == 0
    assert isinstance(row["started"], float) and row["processes_alive"] >= 4  # 2 hosts + 2 workers
    # what the sidebar shows of it
    assert row["workers_alive"] == 2 and len(row["nodes"]) == 1 and row["restart_requested"] is False
    assert row["progress"] is None and row["session"] is None  # the cell sleeps: it reports no step


def test_detail_has_per_worker_status(server, busy_cluster):
    status, data = server.json("GET", "/nbworkers/api/clusters/sleepy")
    assert status == 200, data
    assert data["name"] == "sleepy" and data["status"] == "running"
    assert [w["index"] for w in data["workers"]] == [0, 1]
    assert all(w["status"] == "running" and isinstance(w["metrics"], dict) for w in data["workers"])
    assert "history" not in data["workers"][0]


def test_logs_endpoint(server, busy_cluster):
    status, body, headers = server.request("GET", "/nbworkers/api/clusters/sleepy/logs/1?tail=5")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert "worker up" in body.decode()
    status, body, _ = server.request("GET", "/nbworkers/api/clusters/sleepy/logs/0")
    # the user's view: nbworkers' bookkeeping (launch, fork) and TensorFlow's chatter stay in the file (noise.py)
    assert status == 200 and "worker up" in body.decode() and "--- nbworkers:" not in body.decode(), body
    in_file = (server.run_root / "sleepy" / "worker-0.log").read_text()
    assert in_file.startswith("--- nbworkers: worker 0, launch 0, TF_CPP_MIN_LOG_LEVEL="), in_file
    status, body, _ = server.request("GET", "/nbworkers/api/clusters/sleepy/logs/0?tail=0")
    assert status == 200 and body == b""


# --------------------------------------------------------------------------------------------------- refusals
ENDPOINTS = [
    ("GET", "/nbworkers/api/clusters"),
    ("GET", "/nbworkers/api/clusters/sleepy"),
    ("GET", "/nbworkers/api/clusters/sleepy/logs/0"),
    ("GET", "/nbworkers/api/clusters/sleepy/logs/0?tail=3"),
    ("DELETE", "/nbworkers/api/clusters/sleepy"),
    ("DELETE", "/nbworkers/api/clusters/sleepy?remove=1"),
    ("POST", "/nbworkers/api/clusters/sleepy/restart"),
    ("GET", "/nbworkers/api/anything/else"),
]


@pytest.mark.parametrize("how", ["no token", "wrong token", "wrong token in query", "cookie only"])
def test_unauthenticated_requests_are_refused(server, busy_cluster, how):
    for method, path in ENDPOINTS:
        if how == "no token":
            status, body, _ = server.request(method, path, token=None)
        elif how == "wrong token":
            status, body, _ = server.request(method, path, token="not-the-token")
        elif how == "wrong token in query":
            sep = "&" if "?" in path else "?"
            status, body, _ = server.request(method, f"{path}{sep}token=not-the-token", token=None)
        else:
            status, body, _ = server.request(method, path, token=None, headers={"Cookie": "username-127-0-0-1=x"})
        assert status in (401, 403), (how, method, path, status, body[:200])
        assert b"worker up" not in body and b"sleepy" not in body
    assert not (server.run_root / "sleepy" / "stop-requested").exists()
    assert _state(server, "sleepy")["status"] == "running"


@pytest.fixture
def outside_run(server, tmp_path):
    """A run-like directory outside the run root, linked into it: its contents must never be served."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "state.json").write_text(json.dumps({"name": "secret", "status": "running", "workers": [{"index": 0}],
                                                     "kernel_pid": os.getpid(), "host_pids": [], "worker_pgids": []}))
    (outside / "worker-0.log").write_text("SECRET-LOG-LINE\n")
    link = server.run_root / "linked-out"
    link.symlink_to(outside, target_is_directory=True)
    (server.run_root / "sleepy" / "escape.log").symlink_to(outside / "worker-0.log")
    yield outside
    link.unlink()
    (server.run_root / "sleepy" / "escape.log").unlink()


TRICKS = [
    "/nbworkers/api/clusters/..",
    "/nbworkers/api/clusters/%2e%2e",
    "/nbworkers/api/clusters/%2E%2E/logs/0",
    "/nbworkers/api/clusters/..%2F..%2Fetc",
    "/nbworkers/api/clusters/..%2f",
    "/nbworkers/api/clusters/%2Fetc%2Fpasswd",
    "/nbworkers/api/clusters/%2Fetc/logs/0",
    "/nbworkers/api/clusters//etc/passwd",
    "/nbworkers/api/clusters/../../api/contents",
    "/nbworkers/api/clusters/.hidden",
    "/nbworkers/api/clusters/sleepy%2F..%2F..%2Foutside",
    "/nbworkers/api/clusters/sleepy%00",
    "/nbworkers/api/clusters/%7E",
    "/nbworkers/api/clusters/linked-out",
    "/nbworkers/api/clusters/linked-out/logs/0",
    "/nbworkers/api/clusters/sleepy/logs/..%2Fworker-0",
    "/nbworkers/api/clusters/sleepy/logs/..%2F..%2Foutside%2Fworker-0.log",
    "/nbworkers/api/clusters/sleepy/logs/%2Fetc%2Fpasswd",
    "/nbworkers/api/clusters/sleepy/logs/escape",
    "/nbworkers/api/clusters/sleepy/logs/-1",
    "/nbworkers/api/clusters/sleepy/logs/0x1",
    "/nbworkers/api/clusters/sleepy/logs/2",
    "/nbworkers/api/clusters/sleepy/logs/%C2%B2",  # a superscript two: str.isdigit() says yes
    "/nbworkers/api/clusters/sleepy/logs/0?tail=-5",
    "/nbworkers/api/clusters/sleepy/logs/0?tail=abc",
    "/nbworkers/api/clusters/sleepy/logs/0?tail=%C2%B2",
    "/nbworkers/api/clusters/sleepy/logs/0?tail=1e3",
]


def test_path_tricks_are_refused(server, busy_cluster, outside_run):
    for path in TRICKS:
        status, body, _ = server.request("GET", path)
        assert 400 <= status < 500, (path, status, body[:300])
        assert b"SECRET" not in body and b"root:" not in body, path
    for path in ("/nbworkers/api/clusters/%2e%2e", "/nbworkers/api/clusters/linked-out",
                 "/nbworkers/api/clusters/..%2F..%2Fetc"):
        status, _, _ = server.request("DELETE", path)
        assert 400 <= status < 500, (path, status)
    assert not (outside_run / "stop-requested").exists()
    status, data = server.json("GET", "/nbworkers/api/clusters")
    assert status == 200 and "linked-out" not in {c["name"] for c in data["clusters"]}
    assert not (server.run_root / "sleepy" / "stop-requested").exists()


def test_unknown_cluster_is_404(server):
    status, data = server.json("GET", "/nbworkers/api/clusters/no-such-cluster")
    assert status == 404 and "no cluster named 'no-such-cluster'" in data["message"]


def test_a_running_run_is_never_removed(server, busy_cluster):
    status, data = server.json("DELETE", "/nbworkers/api/clusters/sleepy?remove=1")
    assert status == 409 and "stop it first" in data["message"], data
    status, data = server.json("DELETE", "/nbworkers/api/clusters/sleepy?remove=yes")
    assert status == 400 and "remove=1" in data["message"], data
    assert (server.run_root / "sleepy" / "worker-0.log").exists()
    assert not (server.run_root / "sleepy" / "stop-requested").exists()
    assert _state(server, "sleepy")["status"] == "running"


# --------------------------------------------------------------------------------------------------- stopping
def test_delete_stops_the_cluster_while_its_kernel_is_busy(server, busy_cluster):
    kernel, state = busy_cluster
    pids = _pids_of(state)
    assert not _none_alive(pids)
    assert kernel.execution_state() == "busy"
    status, data = server.json("DELETE", "/nbworkers/api/clusters/sleepy")
    assert status == 200, data
    assert data["status"] == "stopped", data
    assert wait_until(lambda: _none_alive(pids), STOP_TIMEOUT), [p for p in pids if psutil.pid_exists(p)]
    # the kernel's own supervisor did it (nothing had to be killed from outside), and the kernel is still busy
    assert data["killed"] == 0 and data["kernel_alive"] is True
    assert kernel.execution_state() == "busy"
    assert _state(server, "sleepy")["status"] == "stopped"
    # again: nothing left to stop, same answer
    status, again = server.json("DELETE", "/nbworkers/api/clusters/sleepy")
    assert status == 200 and again["status"] == "stopped"


def test_an_ended_run_is_not_restarted_from_outside_but_can_be_removed(server, busy_cluster):
    status, data = server.json("POST", "/nbworkers/api/clusters/sleepy/restart")
    assert status == 409 and "in its notebook" in data["message"], data
    assert not (server.run_root / "sleepy" / "restart-requested").exists()
    status, data = server.json("DELETE", "/nbworkers/api/clusters/sleepy?remove=1")
    assert status == 200 and data == {"name": "sleepy", "removed": True}
    assert not (server.run_root / "sleepy").exists()
    status, _ = server.json("GET", "/nbworkers/api/clusters/sleepy")
    assert status == 404


FAKE_RUN_ID = "fake-run"  # the NBWORKERS_RUN_ID the fake run's processes carry (only marked processes are killed)


def _stubborn_process() -> subprocess.Popen:
    """A process in a session of its own that ignores SIGTERM (as TF workers often do)."""
    proc = subprocess.Popen(
        [PY, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True);"
                   " time.sleep(600)"],
        stdout=subprocess.PIPE, start_new_session=True, env={**os.environ, "NBWORKERS_RUN_ID": FAKE_RUN_ID},
    )
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def _dead_pid() -> int:
    proc = subprocess.Popen([PY, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_fake_run(run_root: Path, name: str, kernel_pid: int, hosts: list[subprocess.Popen],
                   workers: list[subprocess.Popen], started: float) -> Path:
    run_dir = run_root / name
    run_dir.mkdir()
    state = {
        "name": name, "backend": "local", "status": "running", "error": "", "started": started, "ended": None,
        "wall_time": time.time() - started, "restarts": 0, "restart_causes": [], "generation": 0,
        "run_dir": str(run_dir), "dropped": {}, "kernel_pid": kernel_pid, "kernel_id": "gone", "run_id": FAKE_RUN_ID,
        "workers": [{"index": i, "role": "worker", "role_index": i, "host": "", "pid": w.pid, "status": "running",
                     "detail": "", "exit_code": None, "metrics": {"loss": 0.5}, "log_tail": []}
                    for i, w in enumerate(workers)],
        "host_pids": [h.pid for h in hosts], "worker_pgids": [w.pid for w in workers],
        "processes": [[p.pid, started_since_boot(p.pid)] for p in hosts + workers],  # as a kernel records
    }
    for i in range(len(workers)):
        (run_dir / f"worker-{i}.log").write_text(f"line from worker {i}\n")
    (run_dir / "state.json").write_text(json.dumps(state))
    return run_dir


def test_delete_kills_the_processes_of_a_dead_kernel_directly(server):
    started = time.time()
    procs = [_stubborn_process() for _ in range(4)]
    try:
        write_fake_run(server.run_root, "orphaned", _dead_pid(), hosts=procs[:2], workers=procs[2:], started=started)
        status, data = server.json("GET", "/nbworkers/api/clusters/orphaned")
        assert status == 200 and data["status"] == LOST and data["kernel_alive"] is False
        assert data["processes_alive"] == 4
        status, data = server.json("DELETE", "/nbworkers/api/clusters/orphaned")
        assert status == 200, data
        assert data["status"] == "stopped" and data["killed"] == 4 and data["processes_alive"] == 0
        for proc in procs:
            assert proc.wait(timeout=STOP_TIMEOUT) == -signal.SIGKILL  # TERM was ignored, KILL was not
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_a_lost_run_is_stopped_before_it_can_be_removed_and_never_restarted(server):
    run_dir = write_fake_run(server.run_root, "lostrun", _dead_pid(), hosts=[], workers=[], started=time.time())
    status, data = server.json("POST", "/nbworkers/api/clusters/lostrun/restart")
    assert status == 409 and "lost" in data["message"], data
    status, data = server.json("DELETE", "/nbworkers/api/clusters/lostrun?remove=1")
    assert status == 409 and "stop it first" in data["message"] and run_dir.exists(), data
    status, data = server.json("DELETE", "/nbworkers/api/clusters/lostrun")
    assert status == 200 and data["status"] == "stopped"
    status, data = server.json("DELETE", "/nbworkers/api/clusters/lostrun?remove=1")
    assert status == 200 and not run_dir.exists(), data


def test_a_killed_kernel_is_reported_lost_then_reaped(server):
    # A plain Python kernel that loads the extension by hand: the server restarts a killed kernel, and a
    # restarted nbworkers kernel's load-time scan would reap the run before this test sees it "lost".
    kernel = KernelSession(server, kernel_name="python3")
    try:
        out, error = kernel.run("%load_ext nbworkers")
        assert not error, error
        state = _start_sleeping_cluster(kernel, "doomed")
        os.kill(kernel.pid, signal.SIGKILL)
        assert wait_until(lambda: ended(kernel.pid), STOP_TIMEOUT)

        def row():
            status, data = server.json("GET", "/nbworkers/api/clusters")
            return next((c for c in data["clusters"] if c["name"] == "doomed"), None)

        lost = wait_until(lambda: (r := row()) and r["status"] == LOST and r, STOP_TIMEOUT)
        assert lost and lost["kernel_alive"] is False and lost["recorded_status"] == "running"
        assert lost["error"] == KERNEL_GONE  # the same words as once it is reaped
        # the hosts see their kernel's pipe close and stop the workers on their own
        assert wait_until(lambda: _none_alive(_pids_of(state)), STOP_TIMEOUT)

        assert "doomed" in [p.name for p in leftovers.find_leftovers(server.run_root)]
        assert "doomed" in leftovers.reap_leftovers(server.run_root)
        status, data = server.json("GET", "/nbworkers/api/clusters/doomed")
        assert status == 200 and data["status"] == "stopped" and data["error"] == KERNEL_GONE
        assert [w["status"] for w in data["workers"]] == ["stopped", "stopped"]
        assert leftovers.find_leftovers(server.run_root) == []
    finally:
        kernel.close()


def test_delete_of_a_forged_run_never_kills_a_process_that_is_not_the_runs(server):
    """Hardening: a state.json listing an unrelated process (no run marker; or another run's marker) as its hosts
    and workers: DELETE stops the run's record, the processes live on."""
    started = time.time() - 5
    unrelated = subprocess.Popen(["sleep", "600"], start_new_session=True)
    other_runs = subprocess.Popen(["sleep", "600"], start_new_session=True,
                                  env={**os.environ, "NBWORKERS_RUN_ID": "another-run"})
    try:
        write_fake_run(server.run_root, "forged", _dead_pid(), hosts=[unrelated], workers=[other_runs], started=started)
        status, data = server.json("GET", "/nbworkers/api/clusters/forged")
        assert status == 200 and data["processes_alive"] == 0
        status, data = server.json("DELETE", "/nbworkers/api/clusters/forged")
        assert status == 200 and data["killed"] == 0 and data["status"] == "stopped", data
        time.sleep(0.5)
        assert unrelated.poll() is None and other_runs.poll() is None
    finally:
        for proc in (unrelated, other_runs):
            proc.kill()
            proc.wait()


def test_slow_deletes_never_stall_reads(server):
    """Hardening: more DELETEs than stop threads, each waiting for a (live, here: this test process) kernel that
    never stops its run; a GET still answers while every one of them is in flight."""
    import threading

    names = [f"slowstop{i}" for i in range(5)]  # more than stop_threads (4)
    for name in names:
        write_fake_run(server.run_root, name, os.getpid(), hosts=[], workers=[], started=time.time())
    finished: list[str] = []

    def delete(name: str) -> None:
        server.json("DELETE", f"/nbworkers/api/clusters/{name}")
        finished.append(name)

    threads = [threading.Thread(target=delete, args=(n,)) for n in names]
    for thread in threads:
        thread.start()
    # the stop pool takes the DELETEs in any order: wait for any four (the fifth is queued behind them)
    assert wait_until(lambda: sum((server.run_root / n / "stop-requested").exists() for n in names) >= 4, 30)
    status, data = server.json("GET", "/nbworkers/api/clusters")
    assert status == 200 and {n for n in names} <= {c["name"] for c in data["clusters"]}
    status, _ = server.json("GET", f"/nbworkers/api/clusters/{names[0]}")
    assert status == 200
    assert finished == [], "a read waited for a stop: they share a thread pool"
    for thread in threads:
        thread.join(120)
    for name in names:  # let the module's other tests see a clean list
        shutil.rmtree(server.run_root / name, ignore_errors=True)


# --------------------------------------------------------------------------------------------------- isolation
def test_a_run_root_others_can_write_gets_a_clear_error_and_nothing_is_read(server):
    server.run_root.chmod(0o777)
    try:
        for method, path in [("GET", "/nbworkers/api/clusters"), ("GET", "/nbworkers/api/clusters/sleepy"),
                             ("GET", "/nbworkers/api/clusters/sleepy/logs/0"),
                             ("DELETE", "/nbworkers/api/clusters/sleepy")]:
            status, data = server.json(method, path)
            assert status == 500, (method, path, status, data)
            assert str(server.run_root) in data["message"] and f"chmod 700 {server.run_root}" in data["message"]
            assert "worker up" not in json.dumps(data)
    finally:
        server.run_root.chmod(0o755)
    assert server.json("GET", "/nbworkers/api/clusters")[0] == 200


def test_tensorboard_is_served_behind_the_servers_authentication_only(server):
    """%workers tensorboard's TensorBoard listens on no TCP port; the server forwards to it for its own users."""
    pytest.importorskip("tensorboard")
    from nbworkers.magics.notebook import tensorboard

    write_fake_run(server.run_root, "boards", _dead_pid(), hosts=[], workers=[], started=time.time())
    board = tensorboard.start(server.run_root / "boards", TENSORBOARD_UP_TIMEOUT)
    try:
        assert board.url == "/nbworkers/tensorboard/boards/"
        serving = [p for p in psutil.Process(board.proc.pid).children(recursive=True) if p.is_running()]
        assert serving and not [c for p in serving for c in p.net_connections("inet")]  # no TCP, no UDP
        for path in ("/nbworkers/tensorboard/boards/", "/nbworkers/tensorboard/boards/data/runs"):
            for token in (None, "not-the-token"):
                status, body, _ = server.request("GET", path, token=token)
                assert status in (302, 401, 403), (path, token, status)
                assert b"tensorboard" not in body.lower() or status == 302
        status, body, headers = server.request("GET", "/nbworkers/tensorboard/boards/")
        assert status == 200 and b"<tb-webapp>" in body, (status, body[:300])
        status, runs = server.json("GET", "/nbworkers/tensorboard/boards/data/runs")
        assert status == 200 and runs == []
        post = ("POST", "/nbworkers/tensorboard/boards/data/plugin/timeseries/timeSeries")
        form = {"body": b"requests=%5B%5D", "headers": {"Content-Type": "application/x-www-form-urlencoded",
                                                        "X-XSRF-Protected": "1"}}
        assert server.request(*post, token=None, **form)[0] in (302, 401, 403)  # TensorBoard's header is no login
        status, body, _ = server.request(*post, **form)
        assert status == 200 and json.loads(body) == [], (status, body[:300])
        status, _, headers = server.request("GET", "/nbworkers/tensorboard/boards")
        assert status in (301, 302) and headers["Location"].endswith("/nbworkers/tensorboard/boards/")
        write_fake_run(server.run_root, "no-board", _dead_pid(), hosts=[], workers=[], started=time.time())
        status, body, _ = server.request("GET", "/nbworkers/tensorboard/no-board/")
        assert status == 404 and b"%workers tensorboard no-board" in body, (status, body[-500:])
    finally:
        tensorboard.stop_all()
