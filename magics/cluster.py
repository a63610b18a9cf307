"""A cluster: one ``%%worker`` run — its worker group, its relay, its state, its views, its supervisor thread.

The supervisor thread owns the run: it drains the relay, watches the worker processes, applies the failure
policy (one worker fails: the others are stopped, they would hang in a collective), answers stop requests
(from ``stop()``, a widget button on any thread, or the server extension's ``stop-requested`` file), writes
the state file, and refreshes the views at most every ``flush_interval`` seconds. Everything a user calls on
a ``Cluster`` returns at once except ``wait()``.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from nbworkers.distlib import wire

from . import cell_scan
from .backends.host import group_alive
from .backends.local import LocalBackend, WorkerProcess
from .environment import cpp_log_level, worker_env
from .noise import NoiseFilter, noise_level
from .errors import LaunchError
from . import events as ev
from .failures import WorkerFailure
from .ownership import RUN_ID_ENV, new_run_id
from .relay import Message, RelayReceiver
from .rundirs import prepare_run_dir, write_private
from .settings import WorkerSettings, settings as current_settings
from .restart_policy import RestartPolicy
from .spec import LaunchSpec
from .state import ClusterState, WorkerState
from .supervisor import Supervisor, Timings
from . import roles
from .tfconfig import tf_configs

STOP_REQUEST_FILE = "stop-requested"
STATE_FILE = "state.json"
ERROR_LOG_TAIL_LINES = 25  # lines of a failed worker's log quoted in the cluster's error


def log_path(run_dir: Path, index: int) -> Path:
    return run_dir / f"worker-{index}.log"


def read_tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(0, size - 64 * 1024))
            text = file.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Cluster:
    def __init__(self, spec: LaunchSpec, config: WorkerSettings | None = None, backend: Any = None,
                 view_factory: Callable[["Cluster"], Any] | None = None):
        self.spec = spec
        self.name = spec.name
        self.settings = config or current_settings()
        self.backend = backend or backend_for(spec)
        self.run_dir = Path(self.settings.run_root) / self.name
        self._view_factory = view_factory
        self._views: list[Any] = []
        self._views_lock = threading.Lock()
        self._lock = threading.RLock()
        self._waiters = 0
        self._new_run()

    def _new_run(self) -> None:
        """The state of one run of the cell (``__init__``; ``restart()`` of a run that ended: the same cell again)."""
        spec = self.spec
        self._done = threading.Event()
        self._stop_event = threading.Event()
        self._restart_event = threading.Event()
        self._procs: list[WorkerProcess] = []
        self._dirty = True
        self._last_flush = 0.0
        self._last_state_write = 0.0
        self._key = wire.new_key()
        self.run_id = new_run_id()  # NBWORKERS_RUN_ID of every process of this run (ownership.py)
        self._relay: RelayReceiver | None = None
        self._thread: threading.Thread | None = None
        # roles (--chief, --evaluator, --ps N): magics/roles.py; unawaited tasks end with the run (supervisor.py)
        tasks = roles.plan(spec.workers, chief=spec.chief, evaluator=spec.evaluator, ps=spec.ps, cell=spec.code,
                           names=cell_scan.of_spec(spec).names)
        self._tasks = tasks
        self.state = ClusterState(
            name=self.name,
            backend=self.backend.name,
            run_dir=str(self.run_dir),
            workers=[
                WorkerState(index=i, role=t.role, role_index=t.index, log_path=str(log_path(self.run_dir, i)))
                for i, t in enumerate(tasks)
            ],
            kernel_pid=os.getpid(),
            kernel_id=_kernel_id(),
        )
        for worker in self.state.workers:
            worker.log_tail = type(worker.log_tail)(self.settings.log_tail_lines, self.settings.max_line_chars)
        level = noise_level(cpp_log_level(os.environ, spec.env))  # TensorFlow's C++ chatter: magics/noise.py
        self._noise = [NoiseFilter(level) for _ in self.state.workers]
        # every status change, failure decision and restart: the supervisor core (supervisor.py, restart_policy.py)
        self._core = Supervisor(
            self.state, RestartPolicy.from_settings(self.settings, spec.max_restarts),
            Timings.from_settings(self.settings, spec.stall_timeout, spec.timeout), tasks,
        )

    # ----------------------------------------------------------------------------------- user-facing API
    @property
    def status(self) -> str:
        return self.state.status

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self.state.snapshot()

    def stop(self) -> None:
        """Ask the supervisor to stop every worker (TERM, a grace period, KILL). Thread-safe; returns at once."""
        self._stop_event.set()

    def restart(self) -> None:
        """Stop the group and start it again on fresh ports (a run that ended runs again). Thread-safe; returns
        at once."""
        if not self._done.is_set():
            self._restart_event.set()
            return
        self._new_run()  # a fresh run of the same cell; the views stay
        self.start()

    def wait(self, timeout: float | None = None, raise_on_failure: bool = False, echo: Any = None) -> bool:
        """Block until the run ends (True) or ``timeout`` seconds pass (False), refreshing the views meanwhile.

        Called from the kernel's main thread, the refreshes and the final summary go out tied to the
        executing cell, so headless runs (nbclient, papermill) keep them. ``raise_on_failure``: a run that
        ended failed (or a wait that timed out) raises ``RunFailed`` after the final summary, which then leaves
        the worker's traceback to the exception (magics/run_errors.py). ``echo``: a ``magics.echo.WorkerEcho``
        writing the workers' output into the cell as it comes.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._waiters += 1
        try:
            while not self._done.is_set():
                left = self.settings.flush_interval
                if deadline is not None:
                    left = min(left, deadline - time.monotonic())
                    if left <= 0:
                        break
                self._done.wait(left)
                if self._dirty:
                    self._refresh_views()
                if echo is not None:
                    echo.tick(self.snapshot())
            ended = self._done.is_set()
            if echo is not None:
                echo.finish(self.snapshot()) if ended else echo.tick(self.snapshot())
            if ended:
                self._finish_views(error_below=raise_on_failure, echoed=echo is not None)
        finally:
            with self._lock:
                self._waiters -= 1
        if raise_on_failure:
            from .run_errors import run_failure

            failure = run_failure(self.snapshot(), ended=ended, waited=timeout)
            if failure is not None:
                raise failure
        return ended

    def logs(self, worker: int | None = None, tail: int | None = None) -> str:
        """A worker's full log from disk (or every worker's, prefixed by index); ``tail`` keeps the last lines."""
        indices = range(len(self.state.workers)) if worker is None else [self._check_index(worker)]
        parts = []
        for i in indices:
            try:
                text = log_path(self.run_dir, i).read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = ""
            lines = text.splitlines()
            if tail is not None:
                lines = lines[-tail:]
            parts.append("\n".join(f"[{i}] {line}" for line in lines) if worker is None else "\n".join(lines))
        return "\n".join(parts)

    def _check_index(self, worker: int) -> int:
        if not 0 <= worker < len(self.state.workers):
            raise ValueError(f"cluster {self.name!r} has workers 0..{len(self.state.workers) - 1}, not {worker}")
        return worker

    def __repr__(self) -> str:
        return f"<Cluster {self.name!r}: {len(self.state.workers)} workers, {self.status}>"

    def _ipython_display_(self) -> None:
        self.show()

    def show(self) -> Any:
        """Display a live view of this cluster in the current output."""
        from .view import default_view_factory

        view = (self._view_factory or default_view_factory)(self)
        with self._views_lock:
            self._views.append(view)
        view.show()
        if self._done.is_set():
            view.finish(self.snapshot())
        return view

    # ----------------------------------------------------------------------------------- launch
    def start(self) -> "Cluster":
        self._prepare_run_dir()
        self._relay = RelayReceiver(self._key, *self.backend.relay_hosts(),  # ray: every interface, CurveZMQ
                                    curve=getattr(self.backend, "encrypt_relay", False))
        if hasattr(self.backend, "attach_relay"):
            self.backend.attach_relay(self._relay)
        try:
            self._launch_group()
        except BaseException as error:
            self._kill_all()
            self._relay.close()
            if isinstance(error, LaunchError):  # refused before anything ran: leave no trace
                shutil.rmtree(self.run_dir, ignore_errors=True)
            raise
        self._write_state(force=True)
        self._thread = threading.Thread(target=self._supervise, name=f"nbworkers-{self.name}", daemon=True)
        self._thread.start()
        return self

    def _prepare_run_dir(self) -> None:
        # never another kernel's live run; a 0700 directory, 0600 files (rundirs.py)
        code = "\n" + self.spec.code  # line 1: the %%worker line
        prepare_run_dir(self.run_dir, code, pickle.dumps(self.spec.push) if self.spec.push else None,
                        [log_path(self.run_dir, i) for i in range(len(self._tasks))])

    def _launch_group(self) -> None:
        # each worker's TensorFlow address (its machine's, a port free there) and GPUs, chosen by the backend
        placements = self.backend.plan(self._tasks, self.spec.gpus_per_worker)
        gpu_lists = [p.gpus for p in placements]
        configs = tf_configs(self._tasks, [p.host for p in placements], [p.port for p in placements])
        gen = self.state.generation
        gpu_counts = ",".join("0" if g == "-1" else str(len(g.split(","))) for g in gpu_lists)
        self._procs = []
        for i, (task, config) in enumerate(zip(self._tasks, configs)):
            env = worker_env(
                base=os.environ, extra=self.spec.env, tf_config=config, cuda_visible_devices=gpu_lists[i],
                wire_env={
                    wire.ENV_RELAY: self._relay.address,
                    wire.ENV_KEY: self._key,
                    wire.ENV_CLUSTER: self.name,
                    wire.ENV_WORKER: str(i),
                    wire.ENV_GENERATION: str(gen),
                    wire.ENV_RUN_DIR: str(self.run_dir),
                    wire.ENV_CODE: str(self.run_dir / "cell.py"),
                    wire.ENV_PUSH: str(self.run_dir / "push.pkl") if self.spec.push else "",
                    wire.ENV_CWD: self.spec.cwd,
                    wire.ENV_CELL_SCAN: cell_scan.of_spec(self.spec).to_env(),  # magics/cell_scan.py
                    RUN_ID_ENV: self.run_id,
                    "NBWORKERS_MAX_LINE_CHARS": str(self.settings.max_line_chars),  # the hosts cut lines too
                    wire.ENV_RELAY_SERVERKEY: self._relay.server_public_key,  # "" (left out) unless encrypted
                    "NBWORKERS_GPU_COUNTS": gpu_counts,
                    **roles.task_env(task),
                    **self._extra_env(),  # hook: a session's command socket (magics/session.py)
                },
            )
            path = log_path(self.run_dir, i)
            with open(path, "ab") as log:
                log.write(f"--- nbworkers: {task.role} {task.index}, launch {gen}, TF_CONFIG={config}\n".encode())
            self._procs.append(
                self.backend.launch(i, self.spec.python, env, self.spec.cwd, path, self.settings.stop_grace, task.role)
            )

    def _extra_env(self) -> dict[str, str]:
        """More environment for every worker of this run (subclasses: sessions)."""
        return {}

    # ----------------------------------------------------------------------------------- supervisor
    def _supervise(self) -> None:
        try:
            while True:
                messages = self._relay.poll(self.settings.poll_interval)
                with self._lock:
                    for message in messages:
                        self._apply(message)
                    self._check_requests()
                    self._check_processes()
                    self._handle(ev.Tick(idle=self._idle()))
                    ended = self._core.ended
                if ended:
                    break
                self._periodic()
            self._drain_relay()
            with self._lock:
                self._handle(ev.Ended())
        except Exception:
            with self._lock:
                self._handle(ev.SupervisorCrashed(traceback.format_exc()))
        finally:
            with self._lock:
                self.state.ended = self.state.ended or time.time()
                self.state.dropped = self._drop_counts()
            self._write_state(force=True)
            self._done.set()
            with self._lock:
                waiting = self._waiters > 0
            if not waiting:
                self._finish_views()
            if self._relay is not None:
                self._relay.close()
            for proc in self._procs:
                proc.close()

    def _handle(self, event: Any) -> None:
        """Give the supervisor core one event and carry out what it decides (lock held)."""
        for action in self._core.handle(event):
            if isinstance(action, ev.StopGroup):
                for proc in self._procs:
                    proc.request_stop()
            elif isinstance(action, ev.KillGroup):
                self._kill_all()
            elif isinstance(action, ev.DumpStacks):
                for proc in self._procs:
                    proc.dump_stacks()
            elif isinstance(action, ev.RetireWorker):
                self._procs[action.index].request_stop()
            elif isinstance(action, ev.Relaunch):
                self._relaunch()
            elif isinstance(action, ev.RestartScheduled):
                self._restart_scheduled(action.cause)
            elif isinstance(action, ev.Failed):
                self._run_failed(action.failure)
        if self._core.dirty:
            self._core.dirty, self._dirty = False, True

    def _apply(self, message: Message) -> None:
        content = message.content
        if content["gen"] != self.state.generation:
            self._relay.drops.note("stale", f"generation {content['gen']}")
            return
        index = content["worker"]
        if index >= len(self.state.workers):
            self._relay.drops.note("malformed", f"no worker {index}")
            return
        worker = self.state.workers[index]
        self._dirty = True
        if message.kind == "log":
            worker.log_tail.feed(self._noise[index].filter(content["lines"]))
            worker.log_hidden = self._noise[index].dropped
            self._handle(ev.Progress(index))
        elif message.kind == "metrics":
            self._handle(ev.Metrics(index, content))
        elif message.kind == "status":
            self._handle(ev.StatusReported(index, content["state"], content.get("detail") or ""))
        elif message.kind == "hello":
            worker.pid = content["pid"]
            worker.host = content.get("host") or ""
            self._procs[index].worker_pid = content["pid"]

    def _check_requests(self) -> None:
        """Stop and restart requests (any thread, or the server extension's stop file) to the core."""
        if self._core.stopping:
            return
        if self._stop_event.is_set() or (self.run_dir / STOP_REQUEST_FILE).exists():
            self._handle(ev.StopRequested())
        elif self._restart_event.is_set():
            self._restart_event.clear()
            self._handle(ev.RestartRequested())

    def _check_processes(self) -> None:
        exits = []
        for proc, worker in zip(self._procs, self.state.workers):
            code = proc.poll() if worker.exit_code is None else None
            if code is not None:
                exits.append((worker.index, code, read_tail(proc.log_path, ERROR_LOG_TAIL_LINES) if code else ""))
        if exits:
            self._handle(ev.Exited(tuple(exits)))

    def _relaunch(self) -> None:
        """The group again, on fresh ports (the core has started a new attempt)."""
        self._kill_all()
        for proc in self._procs:
            proc.close()
        try:
            self._launch_group()
        except LaunchError as error:  # e.g. a lost node leaves too few for the group
            self._kill_all()
            self._handle(ev.LaunchFailed(str(error)))
        self._dirty = True

    # hooks for subclasses (sessions, magics/session.py); called with the lock held
    def _idle(self) -> bool:
        """True while silence is expected (an idle session): the stall watchdog does not count it."""
        return False

    def _restart_scheduled(self, cause: WorkerFailure) -> None:
        """A restart of the group was decided; it starts again once every process is gone."""

    def _run_failed(self, failure: WorkerFailure) -> None:
        """The run failed (the group is being stopped)."""

    def _drain_relay(self) -> None:
        """The hosts send their last log lines and exit codes just before they exit: take them in."""
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            messages = self._relay.poll(0.05)
            with self._lock:
                for message in messages:
                    self._apply(message)
            if not messages:
                break

    def _kill_all(self) -> None:
        for proc in self._procs:  # SIGKILL what is left; only processes that are ours (ownership.py)
            if proc.alive() or proc.pgids():
                proc.kill()

    def _drop_counts(self) -> dict[str, int]:
        drops = self._relay.drops if self._relay else None
        if drops is None:
            return {}
        return {"bad_signature": drops.bad_signature, "malformed": drops.malformed, "stale": drops.stale,
                "oversized": drops.oversized}

    # ----------------------------------------------------------------------------------- outputs
    def _periodic(self) -> None:
        now = time.monotonic()
        if now - self._last_state_write >= self.settings.state_file_interval:
            self._write_state()
        with self._lock:
            waiting = self._waiters > 0
        if not waiting and self._dirty and now - self._last_flush >= self.settings.flush_interval:
            self._refresh_views()

    def _refresh_views(self) -> None:
        with self._views_lock:
            views = list(self._views)
            self._last_flush = time.monotonic()
            if not views:
                return
            with self._lock:
                self.state.dropped = self._drop_counts()
                snapshot = self.state.snapshot()
                self._dirty = False
            for view in views:
                try:
                    view.update(snapshot)
                except Exception:  # a broken view must not take the run down
                    traceback.print_exc(file=sys.__stderr__)

    def _finish_views(self, error_below: bool = False, echoed: bool = False) -> None:
        from .run_errors import mark_error_below
        from .summary import ECHOED_KEY

        with self._views_lock:
            snapshot = self.snapshot()
            if error_below:  # RunFailed is raised below the summary with the traceback: not shown twice
                snapshot = mark_error_below(snapshot)
            if echoed:  # the workers' output is in the cell already: the summary does not repeat its tail
                snapshot = {**snapshot, ECHOED_KEY: True}
            for view in self._views:
                try:
                    view.finish(snapshot)
                except Exception:
                    traceback.print_exc(file=sys.__stderr__)

    def _write_state(self, force: bool = False) -> None:
        self._last_state_write = time.monotonic()
        with self._lock:
            self.state.dropped = self._drop_counts()
            data = self.state.snapshot()
            data["hostname"] = socket.gethostname()
            data["host_pids"] = [p.host.pid for p in self._procs]
            data["worker_pgids"] = [p.worker_pid for p in self._procs if p.worker_pid]
            data["run_id"] = self.run_id
        for worker in data["workers"]:
            worker.pop("history", None)
            worker["metrics"] = wire.encode_metrics(worker.get("metrics") or {})  # strict JSON for the REST API
        tmp = self.run_dir / (STATE_FILE + ".tmp")
        try:
            write_private(tmp, json.dumps(data).encode("utf-8"))  # 0600 (rundirs.py)
            os.replace(tmp, self.run_dir / STATE_FILE)
        except OSError:
            pass


def backend_for(spec: LaunchSpec) -> Any:
    """The backend a launch asked for (``--backend``); Ray is imported only when it is used."""
    if spec.backend == "ray":
        from .backends.ray_backend import RayBackend

        return RayBackend.from_spec(spec)
    return LocalBackend()


def _kernel_id() -> str:
    """The kernel's id, from its connection file name (kernel-<id>.json), when running in a Jupyter kernel."""
    try:
        from ipykernel.connect import get_connection_file

        name = Path(get_connection_file()).name
    except Exception:
        return ""
    return name[len("kernel-") : -len(".json")] if name.startswith("kernel-") else name
