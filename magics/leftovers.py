"""Runs seen from outside the kernel that started them: liveness, stopping, reaping, read-only attach.

Every run writes ``<run_root>/<name>/state.json`` (the snapshot plus ``kernel_pid``, ``kernel_id``,
``host_pids``, ``worker_pgids``) about once a second. From that file alone this module tells

- whether the run is really alive: a state that says ``running`` whose kernel is dead is a *lost* run;
- which processes are still left of it: the members of its host and worker process groups that were
  created while the run lived (a pid or process group id reused later by another program is never touched);

and it can stop a run (the ``stop-requested`` file, which the kernel's supervisor thread obeys even while the
kernel is busy; then, if the processes are still there after a grace period — the kernel is dead — TERM and
KILL them directly), reap the leftovers of dead kernels (kill what is left, rewrite the state as failed:
"its kernel died"), and attach to a run read-only (``%workers attach NAME``).

Used by the Jupyter server extension and by the kernel when the extension loads. Imports no TensorFlow.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from nbworkers.distlib import wire

from .cluster import STATE_FILE, STOP_REQUEST_FILE, log_path
from .names import valid_name
from .ownership import RunMarker, is_ours
from .private_dirs import write_private
from .settings import settings as current_settings
from .state import DONE_STATES

log = logging.getLogger("nbworkers")

LOST = "lost"  # the status reported for a run whose state says it is running but whose kernel is dead
CREATE_TIME_SLACK = 2.0  # seconds of clock slack when matching a process's start time to a run's lifetime
STOP_MARGIN = 5.0  # seconds a stop request gets beyond the stop grace before processes are killed directly
KILL_GRACE = 3.0  # seconds between SIGTERM and SIGKILL when leftover processes are killed directly
POLL_INTERVAL = 0.1  # seconds between checks while waiting for a run to stop
SETTLE_TIMEOUT = 3.0  # seconds a live kernel gets to record the end of a run whose processes were killed
LOG_MAX_BYTES = 8 * 1024 * 1024  # most bytes of a log returned at once (the end of the log)
WORKER_ID = re.compile(r"[0-9]{1,6}")  # ASCII digits only (str.isdigit() also takes "²")


class RunNotFound(LookupError):
    """No run of that name (or its name is not a valid run name). The message says what to do."""


# ------------------------------------------------------------------------------------------- locating runs
def run_root(root: str | os.PathLike | None = None) -> Path:
    return Path(root if root is not None else current_settings().run_root).expanduser()


def run_dir_of(name: str, root: str | os.PathLike | None = None) -> Path:
    """The run directory of ``name``, refusing anything that could point outside the run root.

    The name must be a valid cluster name (no '/', no '..', no leading '.'), and the directory, with every
    symlink resolved, must lie inside the resolved run root.
    """
    if not isinstance(name, str) or not valid_name(name):
        raise RunNotFound(f"{name!r} is not a cluster name (letters, digits, '.', '_', '-'; at most 64).")
    base = run_root(root).resolve()
    directory = (base / name).resolve()
    if not directory.is_relative_to(base) or directory == base or directory.parent != base:
        raise RunNotFound(f"{name!r} does not name a run directory inside {base}.")
    if not (directory / STATE_FILE).is_file():
        raise RunNotFound(f"no cluster named {name!r} under {base}. `%workers` or GET /nbworkers/api/clusters lists them.")
    return directory


def read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def state_mtime(run_dir: Path) -> float | None:
    try:
        return (run_dir / STATE_FILE).stat().st_mtime
    except OSError:
        return None


def list_run_dirs(root: str | os.PathLike | None = None) -> list[Path]:
    """Every run directory under the run root (valid name, a state file, not a symlink out of the root)."""
    base = run_root(root)
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            found.append(run_dir_of(entry.name, base))
        except RunNotFound:
            continue
    return found


# ------------------------------------------------------------------------------------------- liveness
def _int_list(values: Any) -> list[int]:
    if not isinstance(values, list):
        return []
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 1]


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def is_foreign(state: dict[str, Any]) -> bool:
    """True when the run lives on another machine (a run root shared over the network): hands off."""
    here = socket.gethostname()
    host = state.get("hostname")
    if isinstance(host, str) and host:
        return host != here
    hosts = {w.get("host") for w in state.get("workers") or [] if isinstance(w, dict) and w.get("host")}
    return bool(hosts) and here not in hosts


def kernel_alive(state: dict[str, Any]) -> bool:
    """Is the kernel that started the run still running? (A pid reused by a later process does not count.)"""
    pid = state.get("kernel_pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if is_foreign(state):
        return True  # cannot tell from here; never call another machine's run dead
    try:
        proc = psutil.Process(pid)
        created = proc.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True
    started = state.get("started")
    if isinstance(started, (int, float)) and created > started + CREATE_TIME_SLACK:
        return False  # a newer process got that pid
    return _alive(proc)


def _names_run_dir(proc: psutil.Process, run_dir: Path) -> bool:
    """Does the process's environment say it belongs to that (resolved) run directory?"""
    try:
        value = proc.environ().get(wire.ENV_RUN_DIR)
        return bool(value) and Path(value).resolve() == run_dir
    except (psutil.Error, OSError, ValueError):
        return False


def _is_spare(proc: psutil.Process) -> bool:
    """A warm spare (pre-started before the run it was handed; see backends/spares.py)."""
    try:
        return bool(proc.environ().get("NBWORKERS_SPARE"))
    except (psutil.Error, OSError):
        return False


def leftover_processes(state: dict[str, Any], run_dir: Path | None = None) -> list[psutil.Process]:
    """Live processes of the run, created while it lived: the members of its host and worker process groups,
    and any process whose environment names its run directory (a worker whose group id was never reported,
    a child a worker started in a group of its own). Only processes that are the run's own (``ownership``:
    same user, started after the run, carrying its NBWORKERS_RUN_ID) — whatever pids a stale or forged
    state file lists, nothing else is ever returned (and so never signalled)."""
    if is_foreign(state):
        return []
    groups = set(_int_list(state.get("host_pids"))) | set(_int_list(state.get("worker_pgids")))
    own_dir = run_dir.resolve() if run_dir is not None else None
    if not groups and own_dir is None:
        return []
    started = state.get("started") if isinstance(state.get("started"), (int, float)) else None
    last_seen = state_mtime(run_dir) if run_dir is not None else None
    if kernel_alive(state):
        last_seen = None  # the kernel may have started processes since its last write
    me = os.getpid()
    marker = RunMarker.from_state(state, run_dir)
    found = []
    for proc in psutil.process_iter(["pid", "create_time"]):
        if proc.pid == me:
            continue
        try:
            member = os.getpgid(proc.pid) in groups
        except OSError:
            continue
        if not member and (own_dir is None or not _names_run_dir(proc, own_dir)):
            continue
        created = proc.info.get("create_time") or 0.0
        if started is not None and created < started - CREATE_TIME_SLACK and not (member and _is_spare(proc)):
            continue  # older than the run: another process that reuses the id (a warm spare is older, and ours)
        if last_seen is not None and created > last_seen + CREATE_TIME_SLACK:
            continue
        if not is_ours(proc, marker):
            continue
        if _alive(proc):
            found.append(proc)
    return found


def effective_status(state: dict[str, Any], kernel_is_alive: bool | None = None) -> str:
    status = state.get("status") if isinstance(state.get("status"), str) else "unknown"
    if status in DONE_STATES:
        return status
    alive = kernel_alive(state) if kernel_is_alive is None else kernel_is_alive
    return status if alive else LOST


def describe(run_dir: Path, state: dict[str, Any] | None = None, full: bool = False) -> dict[str, Any] | None:
    """What the REST API and ``%workers attach`` show of a run: its state with a checked status.

    ``full`` False: the summary row (name, kernel, backend, workers, status, started, restarts, ...);
    True: the whole state (per-worker status, latest metrics, log tails) plus the liveness fields.
    """
    state = read_state(run_dir) if state is None else state
    if state is None:
        return None
    alive = kernel_alive(state)
    status = effective_status(state, alive)
    workers = [w for w in state.get("workers") or [] if isinstance(w, dict)]
    mtime = state_mtime(run_dir)
    liveness = {
        "status": status,
        "recorded_status": state.get("status"),
        "kernel_alive": alive,
        "processes_alive": len(leftover_processes(state, run_dir)) if status not in DONE_STATES else 0,
        "state_age": None if mtime is None else max(0.0, time.time() - mtime),
        "stop_requested": (run_dir / STOP_REQUEST_FILE).exists(),
    }
    if status == LOST and not state.get("error"):
        liveness["error"] = f"its kernel (pid {state.get('kernel_pid')}) died; the run was not reaped yet"
    if full:
        data = dict(state)
        data.update(liveness)
        data["name"] = run_dir.name
        data["workers"] = workers
        data.setdefault("error", "")
        return data
    ended = state.get("ended")
    started = state.get("started")
    return {
        "name": run_dir.name,
        "kernel": {"id": state.get("kernel_id") or "", "pid": state.get("kernel_pid")},
        "backend": state.get("backend", ""),
        "workers": len(workers),
        "worker_status": [w.get("status") for w in workers],
        "started": started,
        "ended": ended,
        "wall_time": state.get("wall_time"),
        "restarts": state.get("restarts", 0),
        "error": liveness.pop("error", None) or state.get("error") or "",
        "run_dir": str(run_dir),
        **liveness,
    }


def list_runs(root: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    runs = []
    for run_dir in list_run_dirs(root):
        row = describe(run_dir)
        if row is not None:
            runs.append(row)
    runs.sort(key=lambda r: r.get("started") or 0.0, reverse=True)
    return runs


# ------------------------------------------------------------------------------------------- logs
def read_log(run_dir: Path, worker: str | int, tail: int | None = None, max_bytes: int = LOG_MAX_BYTES) -> str:
    """A worker's log text (the last ``tail`` lines; at most the last ``max_bytes`` bytes)."""
    text = str(worker)
    if not WORKER_ID.fullmatch(text):
        raise RunNotFound(f"worker {worker!r}: give the worker's index, 0, 1, ...")
    index = int(text)
    state = read_state(run_dir) or {}
    count = len(state.get("workers") or [])
    if not 0 <= index < count:
        raise RunNotFound(f"cluster {run_dir.name!r} has workers 0..{count - 1}, not {index}.")
    path = log_path(run_dir, index).resolve()
    if not path.is_relative_to(run_dir.resolve()):
        raise RunNotFound(f"worker {index}'s log is not inside the run directory.")
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(0, size - max_bytes))
            data = file.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first line was cut
    if tail is not None:
        lines = lines[-tail:] if tail > 0 else []
    return "\n".join(lines)


def processes_under(root: str | os.PathLike) -> list[psutil.Process]:
    """Every live process started for a cluster under the run root ``root``, found by its environment: hosts and
    workers (their run directory) and warm spares (the run root of the kernel whose pool started them). What a
    test, the demo or a benchmark checks is gone when it ends; this process itself is never included."""
    prefix = str(root)
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        try:
            env = proc.environ()
            marks = (env.get(wire.ENV_RUN_DIR, ""), env.get("NBWORKERS_SPARE", ""))
            if any(mark.startswith(prefix) for mark in marks) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def kill_process_groups(procs: list[psutil.Process]) -> list[int]:
    """SIGKILL the whole process group of each, now (no grace: for clean-up after a check). Returns their pids."""
    for proc in procs:
        try:
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return [proc.pid for proc in procs]


# ------------------------------------------------------------------------------------------- stopping
def kill_processes(procs: list[psutil.Process], grace: float = KILL_GRACE) -> int:
    """SIGTERM them, wait up to ``grace`` seconds, SIGKILL the rest. Returns how many were signalled."""
    signalled = []
    for proc in procs:
        try:
            proc.terminate()
            signalled.append(proc)
        except psutil.NoSuchProcess:
            continue
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(signalled, timeout=grace)
    alive = [p for p in alive if _alive(p)]
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=grace)
    return len(signalled)


def request_stop(run_dir: Path) -> None:
    """Ask the run's supervisor thread to stop it (it checks this file even while the kernel is busy)."""
    write_private(run_dir / STOP_REQUEST_FILE, f"{time.time()}\n".encode())


def write_state(run_dir: Path, state: dict[str, Any]) -> None:
    tmp = run_dir / f"{STATE_FILE}.{os.getpid()}.tmp"
    write_private(tmp, json.dumps(state).encode("utf-8"))
    os.replace(tmp, run_dir / STATE_FILE)


def mark_ended(run_dir: Path, status: str, error: str, worker_status: str) -> dict[str, Any] | None:
    """Record the end of a run whose kernel is gone (nobody else will)."""
    state = read_state(run_dir)
    if state is None or state.get("status") in DONE_STATES:
        return state
    now = time.time()
    state["status"] = status
    state["error"] = state.get("error") or error
    state["ended"] = now
    if isinstance(state.get("started"), (int, float)):
        state["wall_time"] = now - state["started"]
    state["reaped"] = now
    for worker in state.get("workers") or []:
        if isinstance(worker, dict) and worker.get("status") not in DONE_STATES:
            worker["status"] = worker_status
            worker["detail"] = worker.get("detail") or error
    write_state(run_dir, state)
    return state


def stop_run(run_dir: Path, stop_timeout: float | None = None, kill_grace: float = KILL_GRACE,
             poll_interval: float = POLL_INTERVAL) -> dict[str, Any]:
    """Stop a run and wait for it to be gone (blocking: call it from a worker thread, never an event loop).

    1. write ``stop-requested``: a live kernel's supervisor stops the group (TERM, grace, KILL) and records it;
    2. after ``stop_timeout`` (default: the stop grace + a margin), or at once when the kernel is dead,
       TERM then KILL whatever is left of the host and worker process groups;
    3. when the kernel is dead, record the run as stopped in its state file.
    Returns the run as ``describe(..., full=False)`` shows it, plus ``killed``: processes killed directly.
    """
    if stop_timeout is None:
        stop_timeout = current_settings().stop_grace + STOP_MARGIN
    state = read_state(run_dir) or {}
    killed = 0
    if state.get("status") not in DONE_STATES and not is_foreign(state):
        request_stop(run_dir)
        deadline = time.monotonic() + stop_timeout
        while time.monotonic() < deadline and kernel_alive(state):
            current = read_state(run_dir) or state
            if current.get("status") in DONE_STATES and not leftover_processes(current, run_dir):
                break
            time.sleep(poll_interval)
        state = read_state(run_dir) or state
        killed = kill_processes(leftover_processes(state, run_dir), kill_grace)
        if kernel_alive(state):
            settle = time.monotonic() + SETTLE_TIMEOUT  # let the supervisor notice the exits and record them
            while time.monotonic() < settle and (read_state(run_dir) or {}).get("status") not in DONE_STATES:
                time.sleep(poll_interval)
        else:
            mark_ended(run_dir, "stopped", "stopped by request after its kernel died", "stopped")
    result = describe(run_dir) or {"name": run_dir.name}
    result["killed"] = killed
    return result


# ------------------------------------------------------------------------------------------- reaping
def find_leftovers(root: str | os.PathLike | None = None) -> list[Path]:
    """Run directories whose state says not done but whose kernel is dead."""
    found = []
    for run_dir in list_run_dirs(root):
        state = read_state(run_dir)
        if state is None or state.get("status") in DONE_STATES or is_foreign(state):
            continue
        if not kernel_alive(state):
            found.append(run_dir)
    return found


def reap(run_dir: Path, kill_grace: float = KILL_GRACE) -> dict[str, Any] | None:
    """Kill what is left of a dead kernel's run and record it as failed."""
    state = read_state(run_dir)
    if state is None or state.get("status") in DONE_STATES or kernel_alive(state):
        return state
    kill_processes(leftover_processes(state, run_dir), kill_grace)
    return mark_ended(run_dir, "failed", f"its kernel died (pid {state.get('kernel_pid')}); reaped by nbworkers",
                      "failed")


def reap_leftovers(root: str | os.PathLike | None = None, kill_grace: float = KILL_GRACE) -> list[str]:
    """Reap every leftover under the run root; returns their names."""
    reaped = []
    for run_dir in find_leftovers(root):
        try:
            reap(run_dir, kill_grace)
            reaped.append(run_dir.name)
        except OSError as error:
            log.warning("nbworkers: could not reap the leftovers of %s: %s", run_dir, error)
    return reaped


def scan_at_load(root: str | os.PathLike | None = None) -> threading.Thread:
    """Reap the leftovers of dead kernels in the background (called when the extension loads)."""
    root = run_root(root)

    def scan() -> None:
        try:
            names = reap_leftovers(root)
        except Exception as error:  # a scan must never break the kernel
            log.warning("nbworkers: leftover scan of %s failed: %s", root, error)
            return
        if names:
            log.warning("nbworkers: reaped %d run(s) left by dead kernels: %s (`%%workers attach NAME` shows one)",
                        len(names), ", ".join(names))

    thread = threading.Thread(target=scan, name="nbworkers-leftover-scan", daemon=True)
    thread.start()
    return thread


# ------------------------------------------------------------------------------------------- attach
class AttachedCluster:
    """A read-only handle on a run this kernel did not start (a dead kernel's, or another kernel's).

    ``.name .status .done .snapshot() .logs(worker, tail) .stop() .wait(timeout)`` like a ``Cluster``;
    ``.restart()`` is refused (re-run the cell instead).
    """

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.name = self.run_dir.name
        self.settings = current_settings()
        self._stopper: threading.Thread | None = None

    def snapshot(self) -> dict[str, Any]:
        data = describe(self.run_dir, full=True)
        if data is None:
            raise RunNotFound(f"the state of cluster {self.name!r} is gone from {self.run_dir}.")
        data.setdefault("backend", "")
        data.setdefault("restarts", 0)
        data.setdefault("run_dir", str(self.run_dir))
        if data.get("status") not in DONE_STATES and isinstance(data.get("started"), (int, float)):
            data["wall_time"] = time.time() - data["started"]
        data["attached"] = True
        return data

    @property
    def status(self) -> str:
        state = read_state(self.run_dir)
        return effective_status(state) if state else "unknown"

    @property
    def done(self) -> bool:
        state = read_state(self.run_dir)
        if state is None or state.get("status") in DONE_STATES:
            return True
        return effective_status(state) == LOST and not leftover_processes(state, self.run_dir)

    def logs(self, worker: int | None = None, tail: int | None = None) -> str:
        count = len((read_state(self.run_dir) or {}).get("workers") or [])
        if worker is not None:
            try:
                return read_log(self.run_dir, worker, tail)
            except RunNotFound as error:
                raise ValueError(str(error)) from None
        parts = []
        for i in range(count):
            lines = read_log(self.run_dir, i, tail).splitlines()
            parts.append("\n".join(f"[{i}] {line}" for line in lines))
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop the run (a stop request, then a direct kill if its kernel is gone); returns at once."""
        if self._stopper is None or not self._stopper.is_alive():
            self._stopper = threading.Thread(target=stop_run, args=(self.run_dir,), daemon=True,
                                             name=f"nbworkers-stop-{self.name}")
            self._stopper.start()

    def restart(self) -> None:
        raise RuntimeError(f"cluster {self.name!r} is attached read-only: re-run its %%worker cell to start it again.")

    def wait(self, timeout: float | None = None, raise_on_failure: bool = False, echo: Any = None) -> bool:
        """Block until the run is over (True) or ``timeout`` passes (False). ``raise_on_failure`` and ``echo``
        are accepted for ``Cluster.wait``'s callers and not used: an attached run is only watched."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(POLL_INTERVAL)
        if self._stopper is not None:
            self._stopper.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return True

    def show(self) -> None:
        from IPython.display import display

        from .summary import render_summary_html, render_text
        from .view import HtmlBundle

        snapshot = self.snapshot()
        display(HtmlBundle(render_text(snapshot), render_summary_html(snapshot)))

    def _ipython_display_(self) -> None:
        self.show()

    def __repr__(self) -> str:
        return f"<AttachedCluster {self.name!r}: {self.status}, {self.run_dir}>"


def attach(name: str, root: str | os.PathLike | None = None) -> AttachedCluster:
    """A read-only handle on the run ``name`` under the run root (raises RunNotFound with what to do)."""
    return AttachedCluster(run_dir_of(name, root))


def workers_attach(name: str | None) -> Any:
    """``%workers attach NAME``: this kernel's own cluster of that name, else a read-only attached handle,
    registered so that ``%workers``, ``%workers logs/stop/wait NAME`` work on it."""
    from . import registry

    if not name:
        raise RunNotFound("`%workers attach` needs a cluster name; GET /nbworkers/api/clusters or the run root lists them.")
    if name in registry.names():
        return registry.get(name)
    cluster = attach(name)
    registry.add(cluster)  # type: ignore[arg-type]  # duck-typed like a Cluster
    return cluster
