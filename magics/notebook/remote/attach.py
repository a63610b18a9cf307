"""``%workers attach NAME``: a handle on a run this kernel did not start (a dead kernel's, another kernel's, a
detached run's), shown and waited for like a ``Cluster``. A detached run (``%%worker --detach``: its loop in a
supervisor process of its own, run/detach/supervisor.py) is controllable from it: ``stop()`` and ``restart()`` are the
run directory's request files its loop obeys. Any other run is read-only (``restart()`` refused). Imports no
TensorFlow."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbworkers.magics.notebook import registry
from nbworkers.magics.run.outputs import LiveViews
from nbworkers.magics.rundir.layout import RunNotFound, read_log, read_state, request_restart, run_dir_of, state_mtime
from nbworkers.magics.rundir.listing import describe
from nbworkers.magics.rundir.liveness import LOST, effective_status, leftover_processes
from nbworkers.magics.rundir.stop import stop_run
from nbworkers.magics.settings import settings as current_settings
from nbworkers.magics.shapes import ClusterSnapshot
from nbworkers.magics.views.summary import render_summary_html, render_text
from nbworkers.magics.views.view import HtmlBundle, default_view_factory
from nbworkers.protocol import wire
from nbworkers.protocol.statuses import RECORDED_ENDS

POLL_INTERVAL = 0.1  # seconds between checks while waiting for an attached run to end
HISTORY_POINTS = 2000  # a detached run's chart: points kept per worker (as the run's own state keeps)


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

    def snapshot(self) -> ClusterSnapshot:
        data = describe(self.run_dir, full=True)
        if data is None:
            raise RunNotFound(f"the state of cluster {self.name!r} is gone from {self.run_dir}.")
        data.setdefault("backend", "")
        data.setdefault("restarts", 0)
        data.setdefault("run_dir", str(self.run_dir))
        if data.get("status") not in RECORDED_ENDS and isinstance(data.get("started"), (int, float)):
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
        if state is None or state.get("status") in RECORDED_ENDS:
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

    @property
    def detached(self) -> bool:
        """Run by a supervisor process of its own (``--detach``), outside any kernel."""
        return bool((read_state(self.run_dir) or {}).get("detached"))

    def restart(self) -> None:
        """A detached run that is still running: stop its group and start it again (its loop takes the request)."""
        if not self.detached:
            raise RuntimeError(f"cluster {self.name!r} is attached read-only: re-run its %%worker cell to start it "
                               f"again.")
        if self.done:
            raise RuntimeError(f"detached cluster {self.name!r} has ended (its supervisor process with it): re-run "
                               f"its %%worker --detach cell to start it again.")
        request_restart(self.run_dir)

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

        snapshot = self.snapshot()
        display(HtmlBundle(render_text(snapshot), render_summary_html(snapshot)))

    def _ipython_display_(self) -> None:
        self.show()

    def __repr__(self) -> str:
        if self.detached:
            return f"<AttachedCluster {self.name!r} (detached): {self.status}, {self.run_dir}>"
        return f"<AttachedCluster {self.name!r}: {self.status}, {self.run_dir}>"


class DetachedCluster(AttachedCluster):
    """A detached run's handle (``%%worker --detach``): the live widget (or text view), refreshed from its state
    file, whose Stop and Restart are the run directory's request files its supervisor process obeys."""

    def __init__(self, run_dir: Path):
        super().__init__(run_dir)
        self._views = LiveViews()
        self._watcher: threading.Thread | None = None
        self._history: dict[int, list[tuple[int, tuple[tuple[str, Any], ...]]]] = {}  # per worker, for the chart

    def snapshot(self) -> ClusterSnapshot:
        """The state file's picture, with the chart's history gathered here from each picture (state.json carries
        the latest metrics only): a point per state-file write that brought new metrics."""
        data = super().snapshot()
        for worker in data.get("workers") or []:
            metrics = wire.decode_metrics(worker.get("metrics") or {})
            history = self._history.setdefault(worker.get("index", 0), [])
            point = (_global_step(worker), tuple(sorted(metrics.items())))
            if metrics and (not history or history[-1] != point):
                history.append(point)
                del history[:-HISTORY_POINTS]
            worker["history"] = list(history)
        return data

    def show(self) -> None:  # type: ignore[override]  # a View, as Cluster.show
        view = default_view_factory(self)
        self._views.add(view)
        view.show()
        if self._watcher is None or not self._watcher.is_alive():
            self._watcher = threading.Thread(target=self._watch, daemon=True, name=f"nbworkers-watch-{self.name}")
            self._watcher.start()

    def _watch(self) -> None:
        """Refresh the views when the state file changes, the final summary once the run is over."""
        seen: float | None = None
        while not self.done:
            mtime = state_mtime(self.run_dir)
            if mtime != seen:
                seen = mtime
                self._views.refresh(self.snapshot)
            time.sleep(self.settings.flush_interval)
        self._views.finish(self.snapshot)


def _global_step(worker: Mapping[str, Any]) -> int:
    """The chart's x, as the run's own state computes it (magics/run/core/state.py, ``global_step``)."""
    step, epoch, total = worker.get("step") or 0, worker.get("epoch"), worker.get("steps_total")
    if isinstance(epoch, int) and isinstance(total, int) and total:
        return max(epoch - 1, 0) * total + step
    if isinstance(epoch, int) and worker.get("step") is None:
        return epoch
    return step if isinstance(step, int) else 0


def attach(name: str, root: str | os.PathLike | None = None) -> AttachedCluster:
    """A handle on the run ``name`` under the run root (raises RunNotFound with what to do): a detached run's
    controllable one, else a read-only one."""
    run_dir = run_dir_of(name, root)
    if (read_state(run_dir) or {}).get("detached"):
        return DetachedCluster(run_dir)
    return AttachedCluster(run_dir)


def workers_attach(name: str | None) -> Any:
    """``%workers attach NAME``: this kernel's own cluster of that name, else a read-only attached handle,
    registered so that ``%workers``, ``%workers logs/stop/wait NAME`` work on it."""
    if not name:
        raise RunNotFound("`%workers attach` needs a cluster name; "
                          "GET /nbworkers/api/clusters or the run root lists them.")
    if name in registry.names():
        return registry.get(name)
    cluster = attach(name)
    registry.add(cluster)  # type: ignore[arg-type]  # duck-typed like a Cluster
    return cluster
