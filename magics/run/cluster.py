"""A cluster: one ``%%worker`` run — its worker group, its relay, its state, its views, its supervisor thread.

The supervisor thread owns the run: it drains the relay, polls the worker processes and the stop/restart
requests (``stop()``, a widget button on any thread, or the server extension's ``stop-requested`` and
``restart-requested`` files), turns what it saw into events for the supervisor core and carries out the actions
the core decides (stop, kill, dump stacks, relaunch). Every status change, failure decision and restart is the
core's (magics/run/core/supervisor.py, its policy magics/run/core/restart_policy.py): one worker fails, the
others are stopped (they would hang in a collective). The thread also writes the state file and refreshes the
views at most every ``flush_interval`` seconds (magics/run/outputs.py). Launching the group is
magics/run/group_launch.py, reaching its processes magics/run/worker_group.py. Everything a user calls on a
``Cluster`` returns at once except ``wait()``.
"""

from __future__ import annotations

import os
import pickle
import shutil
import threading
import time
import traceback
from typing import Any, Callable, assert_never

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch import roles
from nbworkers.magics.launch.environment import cpp_log_level
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.run.capacity import CapacityLooks, elastic_start
from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.core.failures import WorkerFailure
from nbworkers.magics.run.core.restart_policy import RestartPolicy
from nbworkers.magics.run.core.supervisor import Supervisor
from nbworkers.magics.run.core.timings import Timings
from nbworkers.magics.run.failed import run_failure
from nbworkers.magics.run.group_launch import backend_for, initial_state, launch_group, new_worker_state
from nbworkers.magics.run.messages import message_events
from nbworkers.magics.run.noise import NoiseFilter, noise_level
from nbworkers.magics.run.outputs import LiveViews, final_snapshot, read_logs, state_file_data, wait_for
from nbworkers.magics.run.relay import Message, RelayReceiver
from nbworkers.magics.run.worker_group import WorkerGroup
from nbworkers.magics.rundir import layout as rundir
from nbworkers.magics.rundir.layout import log_path  # the run directory's layout: rundir.py
from nbworkers.magics.rundir.prepare import prepare_run_dir
from nbworkers.magics.settings import WorkerSettings
from nbworkers.magics.settings import settings as current_settings
from nbworkers.magics.shapes import Backend, ClusterSnapshot, View
from nbworkers.magics.views.view import default_view_factory
from nbworkers.procs.ownership import new_run_id
from nbworkers.protocol import cell_scan, wire
from nbworkers.protocol.private.files import sign_push


class Cluster:
    def __init__(self, spec: LaunchSpec, config: WorkerSettings | None = None, backend: Backend | None = None,
                 view_factory: Callable[["Cluster"], View] | None = None):
        self.spec = spec
        self.name = spec.name
        self.settings = config or current_settings()
        self.backend = backend or backend_for(spec)
        self.run_dir = rundir.path_for(self.name, self.settings.run_root)
        self._view_factory = view_factory
        self._views = LiveViews()
        self._lock = threading.RLock()
        self._waiters = 0
        self._new_run()

    def _new_run(self) -> None:
        """The state of one run of the cell (``__init__``; ``restart()`` of a run that ended: the same cell again)."""
        spec = self.spec
        self._done = threading.Event()
        self._stop_event = threading.Event()
        self._restart_event = threading.Event()
        self._looks = CapacityLooks(self.backend, self.settings.elastic_check_interval)  # elastic runs
        self._worker_group = WorkerGroup()  # the processes of the current attempt (worker_group.py)
        self._dirty = True
        self._last_state_write = 0.0
        self._key = wire.new_key()
        self.run_id = new_run_id()  # NBWORKERS_RUN_ID of every process of this run (ownership.py)
        self._relay: RelayReceiver | None = None
        self._thread: threading.Thread | None = None
        # roles (--chief, --evaluator, --ps N): magics/launch/roles.py; unawaited tasks end with the run (supervisor.py)
        elastic, capacity = elastic_start(spec, self.backend)  # --min-workers: as many as the cluster can place
        tasks = roles.plan(elastic.size_for(capacity) if elastic else spec.workers, chief=spec.chief,
                           evaluator=spec.evaluator, ps=spec.ps, cell=spec.code, names=cell_scan.of_spec(spec).names)
        self.state = initial_state(self.name, self.backend.name, self.run_dir, tasks, self.settings)
        self._noise_level = noise_level(cpp_log_level(os.environ, spec.env))  # C++ chatter: magics/run/noise.py
        self._noise = [NoiseFilter(self._noise_level) for _ in self.state.workers]
        # every status change, failure decision and restart: the supervisor core (supervisor.py, restart_policy.py)
        self._core = Supervisor(
            self.state, RestartPolicy.from_settings(self.settings, spec.max_restarts),
            Timings.from_settings(self.settings, spec.stall_timeout, spec.timeout), tasks,
            clock=time.monotonic, wall=time.time, elastic=elastic,
            new_worker=lambda i: new_worker_state(self.run_dir, self.settings, i),
        )
        if elastic is not None:
            self.state.elastic = {"min": elastic.min, "max": elastic.max}
            self._core.handle(ev.CapacitySeen(capacity))

    # ----------------------------------------------------------------------------------- user-facing API
    @property
    def status(self) -> str:
        return str(self.state.status)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def snapshot(self) -> ClusterSnapshot:
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> ClusterSnapshot:
        """The state's picture, with the relay's drop counts (lock held)."""
        data = self.state.snapshot(time.time())
        data["dropped"] = self._drop_counts()
        return data

    def stop(self) -> None:
        """Ask the supervisor to stop every worker (INT, TERM, a grace period, KILL). Thread-safe; returns at once."""
        self._stop_event.set()

    def restart(self) -> None:
        """Stop the group and start it again on fresh ports (a run that ended runs again). Thread-safe; returns
        at once."""
        if not self._done.is_set():
            self._restart_event.set()
            return
        self._new_run()  # a fresh run of the same cell; the views stay
        self.start()

    def resize(self) -> str:
        """``%workers resize NAME``: an elastic run smaller than ``-n`` restarts bigger now if the cluster has room
        (magics/run/core/elastic.py). Returns what happened, in words."""
        if self._done.is_set():
            return "the run has ended: Restart it (or run the cell again) to start it at the size the cluster allows"
        if self._core.elastic is None:
            return self._core.resize_note or "not elastic: its size is fixed (-n); run the cell with --min-workers M"
        if not self._looks.ask(self.settings.stop_grace):
            return "no answer from the supervisor: look at `%workers` in a moment"
        return self._core.resize_note

    def wait(self, timeout: float | None = None, raise_on_failure: bool = False, echo: Any = None) -> bool:
        """Block until the run ends (True) or ``timeout`` seconds pass (False), refreshing the views meanwhile.

        Called from the kernel's main thread, the refreshes and the final summary go out tied to the
        executing cell, so headless runs (nbclient, papermill) keep them. ``raise_on_failure``: a run that
        ended failed (or a wait that timed out) raises ``RunFailed`` after the final summary, which then leaves
        the worker's traceback to the exception (magics/run/failed.py). ``echo``: a ``magics.echo.WorkerEcho``
        writing the workers' output into the cell as it comes.
        """
        def tick() -> None:
            if self._dirty:
                self._refresh_views()
            if echo is not None:
                echo.tick(self.snapshot())

        with self._lock:
            self._waiters += 1
        try:
            ended = wait_for(self._done, timeout, self.settings.flush_interval, tick)
            if echo is not None:
                echo.finish(self.snapshot()) if ended else echo.tick(self.snapshot())
            if ended:
                self._finish_views(error_below=raise_on_failure, echoed=echo is not None)
        finally:
            with self._lock:
                self._waiters -= 1
        if raise_on_failure:
            failure = run_failure(self.snapshot(), ended=ended, waited=timeout)
            if failure is not None:
                raise failure
        return ended

    def logs(self, worker: int | None = None, tail: int | None = None) -> str:
        """A worker's full log from disk (or every worker's, prefixed by index); ``tail`` keeps the last lines."""
        index = None if worker is None else self._check_index(worker)
        return read_logs(self.run_dir, len(self.state.workers), index, tail)

    def _check_index(self, worker: int) -> int:
        if not 0 <= worker < len(self.state.workers):
            raise ValueError(f"cluster {self.name!r} has workers 0..{len(self.state.workers) - 1}, not {worker}")
        return worker

    def __repr__(self) -> str:
        return f"<Cluster {self.name!r}: {len(self.state.workers)} workers, {self.status}>"

    def _ipython_display_(self) -> None:
        self.show()

    def show(self) -> View:
        """Display a live view of this cluster in the current output."""
        view = (self._view_factory or default_view_factory)(self)
        self._views.add(view)
        view.show()
        if self._done.is_set():
            view.finish(self.snapshot())
        return view

    # ----------------------------------------------------------------------------------- launch
    def start(self) -> "Cluster":
        self._prepare_run_dir()
        self._relay = RelayReceiver(self._key, *self.backend.relay_hosts(),  # ray: every interface, CurveZMQ
                                    curve=self.backend.encrypt_relay)
        self.backend.attach_relay(self._relay)
        try:
            self._launch_group()
        except BaseException as error:
            self._worker_group.kill()
            self._relay.close()
            self._close_backend()
            if isinstance(error, LaunchError):  # refused before anything ran: leave no trace
                shutil.rmtree(self.run_dir, ignore_errors=True)
            raise
        self._write_state()
        self._thread = threading.Thread(target=self._supervise, name=f"nbworkers-{self.name}", daemon=True)
        self._thread.start()
        return self

    def _prepare_run_dir(self) -> None:
        # never another kernel's live run; a 0700 directory, 0600 files (rundir_prepare.py)
        code = "\n" + self.spec.code  # line 1: the %%worker line
        push = sign_push(self._key, pickle.dumps(self.spec.push)) if self.spec.push else None  # checked by workers
        prepare_run_dir(self.run_dir, code, push,
                        [log_path(self.run_dir, i) for i in range(len(self._core.tasks))])

    def _launch_group(self) -> None:
        # each worker's address, GPUs, TF_CONFIG and environment: group_launch.py
        self._worker_group = WorkerGroup()
        launch_group(self._worker_group.handles, backend=self.backend, spec=self.spec, settings=self.settings,
                     tasks=self._core.tasks, run_dir=self.run_dir, generation=self.state.generation, relay=self.relay,
                     key=self._key, run_id=self.run_id, extra_env=self._extra_env())

    def _extra_env(self) -> dict[str, str]:
        """More environment for every worker of this run (subclasses: sessions)."""
        return {}

    # ----------------------------------------------------------------------------------- supervisor
    @property
    def relay(self) -> RelayReceiver:
        """The run's relay (from ``start()`` on)."""
        assert self._relay is not None, f"cluster {self.name!r} was not started"
        return self._relay

    def _supervise(self) -> None:
        try:
            while True:
                messages = self.relay.poll(self.settings.poll_interval)
                with self._lock:
                    for message in messages:
                        self._apply(message)
                    self._check_requests()
                    self._check_processes()
                self._look_at_capacity()
                with self._lock:
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
            self._write_state()
            # released before the run says it is done: a restart() of the ended run (the same backend) may follow
            if self._relay is not None:
                self._relay.close()
            self._worker_group.close()
            self._close_backend()
            self._done.set()
            with self._lock:
                waiting = self._waiters > 0
            if not waiting:
                self._finish_views()

    def _close_backend(self) -> None:
        """What the backend holds for this run (the local backend: its network namespace's holder)."""
        self.backend.close()

    def _handle(self, event: ev.Event) -> None:
        """Give the supervisor core one event and carry out what it decides (lock held)."""
        actions = self._core.handle(event)
        if actions or not isinstance(event, (ev.Tick, ev.Progress)):  # the others change what views show
            self._dirty = True
        for action in actions:
            match action:
                case ev.StopGroup():
                    self._worker_group.request_stop()
                case ev.KillGroup():
                    self._worker_group.kill()
                case ev.DumpStacks():
                    self._worker_group.dump_stacks()
                case ev.RetireWorker():
                    self._worker_group.retire(action.index)
                case ev.Relaunch():
                    self._relaunch()
                case ev.RestartScheduled():
                    self._restart_scheduled(action.cause)
                case ev.Failed():
                    self._run_failed(action.failure)
                case _:
                    assert_never(action)

    def _apply(self, message: Message) -> None:
        events, dropped = message_events(message, self.state.generation, self._noise, self._worker_group.node_label)
        if dropped:
            self.relay.drops.note(*dropped)
            return
        self._dirty = True
        for event in events:
            self._handle(event)
            if isinstance(event, ev.Hello):
                self._worker_group.note_worker(event.worker, event.pid)

    def _check_requests(self) -> None:
        """Stop and restart requests (any thread, or the server extension's request files) to the core."""
        if self._core.stopping:
            return
        if self._stop_event.is_set() or rundir.stop_requested(self.run_dir):
            self._handle(ev.StopRequested())
        elif self._restart_event.is_set() or rundir.take_restart_request(self.run_dir):
            self._restart_event.clear()
            self._handle(ev.RestartRequested())

    def _look_at_capacity(self) -> None:
        """An elastic run's look at how many workers its cluster can place, when one is due (capacity.py)."""
        self._looks.look(self._core, lambda event: self._handle(event), self._lock)

    def _check_processes(self) -> None:
        exits = self._worker_group.exits([w.index for w in self.state.workers if w.exit_code is None])
        if exits:
            self._handle(ev.Exited(tuple(exits)))

    def _relaunch(self) -> None:
        """The group again, on fresh ports (the core has started a new attempt)."""
        self._worker_group.kill()
        self._worker_group.close()
        size = len(self._core.tasks)  # an elastic group may have changed size (the core's decision)
        self._noise = self._noise[:size] + [NoiseFilter(self._noise_level) for _ in range(len(self._noise), size)]
        try:
            self._launch_group()
        except LaunchError as error:  # e.g. a lost node leaves too few for the group
            self._worker_group.kill()
            self._handle(ev.LaunchFailed(str(error)))
        self._dirty = True

    # hooks for subclasses (sessions, magics/sessions/session.py); called with the lock held
    def _idle(self) -> bool:
        """True while silence is expected (an idle session): the stall watchdog does not count it."""
        return False

    def _restart_scheduled(self, cause: WorkerFailure) -> None:
        """A restart of the group was decided; it starts again once every process is gone."""

    def _run_failed(self, failure: WorkerFailure) -> None:
        """The run failed (the group is being stopped)."""

    def _drain_relay(self) -> None:
        """The hosts send their last log lines and exit codes just before they exit: take them in."""
        deadline = time.monotonic() + self.settings.relay_drain_time
        while time.monotonic() < deadline:
            messages = self.relay.poll(self.settings.relay_drain_poll)
            with self._lock:
                for message in messages:
                    self._apply(message)
            if not messages:
                break

    def _drop_counts(self) -> dict[str, int]:
        return self._relay.drops.counts() if self._relay else {}

    # ----------------------------------------------------------------------------------- outputs
    def _periodic(self) -> None:
        now = time.monotonic()
        if now - self._last_state_write >= self.settings.state_file_interval:
            self._write_state()
        with self._lock:
            waiting = self._waiters > 0
        if not waiting and self._dirty and now - self._views.last_flush >= self.settings.flush_interval:
            self._refresh_views()

    def _refresh_views(self) -> None:
        def snapshot() -> ClusterSnapshot:
            with self._lock:
                self._dirty = False
                return self._snapshot()

        self._views.refresh(snapshot)

    def _finish_views(self, error_below: bool = False, echoed: bool = False) -> None:
        self._views.finish(lambda: final_snapshot(self.snapshot(), error_below, echoed))

    def _write_state(self) -> None:
        self._last_state_write = time.monotonic()
        with self._lock:
            data = state_file_data(self._snapshot(), self._worker_group.handles, self.run_id)
        try:
            rundir.write_state(self.run_dir, data)  # atomic, 0600
        except OSError:
            pass

