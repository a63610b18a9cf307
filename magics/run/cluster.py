"""A cluster: the user's handle over one ``%%worker`` run (``Cluster``), and over its runs again after a Restart.

The run itself is the run loop's (``loop.py``): the relay, the worker group, the supervisor core, the state file,
one queue of events. The handle asks it (``stop()``, ``restart()``, ``resize()``: requests it takes at its next
round; a widget button on any thread, or the server extension's request files, do the same), reads its one snapshot
(``snapshot()``: the views, state.json and the REST API read the same), and keeps the run's live views
(refreshed from the loop's rounds at most every ``flush_interval`` seconds, magics/run/outputs.py). A session is
not a kind of cluster: it is a participant of the loop (``participants``, magics/sessions/participant.py) and
holds a ``Cluster`` as its handle over the run. Everything a user calls returns at once except ``wait()``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.run.core.state import ClusterState
from nbworkers.magics.run.failed import run_failure
from nbworkers.magics.run.group_launch import backend_for
from nbworkers.magics.run.loop import Participant, RunLoop
from nbworkers.magics.run.outputs import LiveViews, Waits, final_snapshot, read_logs
from nbworkers.magics.run.relay import RelayReceiver
from nbworkers.magics.rundir import layout as rundir
from nbworkers.magics.settings import WorkerSettings
from nbworkers.magics.settings import settings as current_settings
from nbworkers.magics.shapes import Backend, ClusterSnapshot, View
from nbworkers.magics.views.view import default_view_factory


class Cluster:
    def __init__(self, spec: LaunchSpec, config: WorkerSettings | None = None, backend: Backend | None = None,
                 view_factory: Callable[["Cluster"], View] | None = None, participants: Sequence[Participant] = ()):
        self.spec = spec
        self.name = spec.name
        self.settings = config or current_settings()
        self.backend = backend or backend_for(spec)
        self.run_dir = rundir.path_for(self.name, self.settings.run_root)
        self._view_factory = view_factory
        self._participants = tuple(participants)
        self._views = LiveViews()
        self._lock = threading.RLock()  # the run loop's: one for every run of this handle
        self._waits = Waits()  # wait() calls refreshing the views themselves
        self._detached = False
        self._new_run()

    def _new_run(self) -> None:
        """A run of the cell (``__init__``; ``restart()`` of a run that ended: the same cell again)."""
        self._loop = RunLoop(self.spec, self.settings, self.backend, self._lock, self._participants,
                             after_round=self._after_round, after_end=self._after_end)
        self._loop.detached = self._detached

    # ----------------------------------------------------------------------------------- user-facing API
    @property
    def state(self) -> ClusterState:
        """The run's state (the supervisor core's to change: read it with ``snapshot()``)."""
        return self._loop.state

    @property
    def detached(self) -> bool:
        """Its runs are run by their own supervisor process, outside the kernel (``--detach``): state.json says so."""
        return self._detached

    @detached.setter
    def detached(self, value: bool) -> None:
        self._detached = self._loop.detached = value

    @property
    def relay(self) -> RelayReceiver:
        """The run's relay (from ``start()`` on)."""
        return self._loop.relay

    @property
    def status(self) -> str:
        return str(self._loop.state.status)

    @property
    def done(self) -> bool:
        return self._loop.done.is_set()

    @property
    def lock(self) -> threading.RLock:
        """The run loop's lock (its participants' state is under it too)."""
        return self._lock

    @property
    def ending(self) -> bool:
        """Its supervisor is stopping it, or it ended."""
        return self._loop.ending

    @property
    def restart_pending(self) -> bool:
        """A restart of the group is under way (lock held)."""
        return self._loop.core.restart_pending

    @property
    def stop_requested(self) -> bool:
        """``stop()`` was called (the supervisor may not have taken it yet)."""
        return self._loop.stop_event.is_set()

    @property
    def stopping(self) -> bool:
        """A stop was asked for (or the run ended): it takes no new work."""
        return self._loop.done.is_set() or self._loop.stop_event.is_set() or self._loop.core.stopping

    def snapshot(self) -> ClusterSnapshot:
        """The one picture of the run, its participants' parts included (a session's cells)."""
        with self._lock:
            return self._loop.snapshot()

    def stop(self) -> None:
        """Ask the supervisor to stop every worker (INT, TERM, a grace period, KILL). Thread-safe; returns at once."""
        self._loop.stop()

    def wait_done(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the current run's end (a detached session's supervisor process waits so);
        whether it ended. ``wait()`` is the user's: it refreshes the views and says how the run ended."""
        return self._loop.wait_done(timeout)

    def restart(self) -> None:
        """Stop the group and start it again on fresh ports (a run that ended runs again). Thread-safe; returns
        at once."""
        if not self._loop.done.is_set():
            self._loop.restart_event.set()
            return
        self._new_run()  # a fresh run of the same cell; the views stay
        self.start()

    def resize(self) -> str:
        """``%workers resize NAME``: an elastic run smaller than ``-n`` restarts bigger now if the cluster has room
        (magics/run/core/elastic.py). Returns what happened, in words."""
        core = self._loop.core
        if self._loop.done.is_set():
            return "the run has ended: Restart it (or run the cell again) to start it at the size the cluster allows"
        if core.elastic is None:
            return core.resize_note or "not elastic: its size is fixed (-n); run the cell with --min-workers M"
        if not self._loop.ask_capacity():
            return "no answer from the supervisor: look at `%workers` in a moment"
        return core.resize_note

    def wait(self, timeout: float | None = None, raise_on_failure: bool = False, echo: Any = None) -> bool:
        """Block until the run ends (True) or ``timeout`` seconds pass (False), refreshing the views meanwhile.

        Called from the kernel's main thread, the refreshes and the final summary go out tied to the
        executing cell, so headless runs (nbclient, papermill) keep them. ``raise_on_failure``: a run that
        ended failed (or a wait that timed out) raises ``RunFailed`` after the final summary, which then leaves
        the worker's traceback to the exception (magics/run/failed.py). ``echo``: a ``magics.echo.WorkerEcho``
        writing the workers' output into the cell as it comes.
        """
        def tick() -> None:
            if self._loop.dirty:
                self._refresh_views()
            if echo is not None:
                echo.tick(self.snapshot())

        ended = self._waits.wait(self._loop.done, timeout, self.settings.flush_interval, tick, echo, self.snapshot,
                                 lambda: self._finish_views(error_below=raise_on_failure, echoed=echo is not None))
        if raise_on_failure:
            failure = run_failure(self.snapshot(), ended=ended, waited=timeout)
            if failure is not None:
                raise failure
        return ended

    def logs(self, worker: int | None = None, tail: int | None = None) -> str:
        """A worker's full log from disk (or every worker's, prefixed by index); ``tail`` keeps the last lines."""
        index = None if worker is None else self.check_index(worker)
        return read_logs(self.run_dir, len(self.state.workers), index, tail)

    def check_index(self, worker: int) -> int:
        """``worker``, if the run has that worker; else a ``ValueError`` naming the ones it has."""
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
        if self._loop.done.is_set():
            view.finish(self.snapshot())
        return view

    def start(self) -> "Cluster":
        """Launch the group and start the run loop's thread (``LaunchError``: refused, nothing left behind)."""
        self._loop.start()
        return self

    # ----------------------------------------------------------------------------------- views (the loop's callbacks)
    def _after_round(self) -> None:
        """The loop's round: the views, at most every ``flush_interval`` seconds, unless a ``wait()`` refreshes them."""
        due = self._loop.dirty and time.monotonic() - self._views.last_flush >= self.settings.flush_interval
        if due and not self._waits.any:
            self._refresh_views()

    def _after_end(self) -> None:
        """The loop ended: the final summary, unless a ``wait()`` leaves it (tied to its cell)."""
        if not self._waits.any:
            self._finish_views()

    def _refresh_views(self) -> None:
        def snapshot() -> ClusterSnapshot:
            with self._lock:
                self._loop.dirty = False
                return self._loop.snapshot()

        self._views.refresh(snapshot)

    def _finish_views(self, error_below: bool = False, echoed: bool = False) -> None:
        self._views.finish(lambda: final_snapshot(self.snapshot(), error_below, echoed))
