"""What a run shows outside its supervisor: its live views (added from any thread, refreshed and finished with
a snapshot; a view that raises is reported on the kernel's stderr and never takes the run down), the blocking
wait that refreshes them, the final summary's snapshot, the state file's payload and the workers' logs.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from nbworkers.magics.run.failed import mark_error_below
from nbworkers.magics.rundir.layout import log_path
from nbworkers.magics.shapes import ClusterSnapshot, View, WorkerHandle
from nbworkers.magics.views.summary import ECHOED_KEY
from nbworkers.procs.ownership import started_since_boot
from nbworkers.protocol import wire
from nbworkers.protocol.terminal import settled_lines


class LiveViews:
    def __init__(self) -> None:
        self._views: list[View] = []
        self.lock = threading.Lock()
        self.last_flush = 0.0  # time.monotonic() of the last refresh

    def add(self, view: View) -> None:
        with self.lock:
            self._views.append(view)

    def refresh(self, take_snapshot: Callable[[], Any]) -> None:
        """Update every view; ``take_snapshot`` is called (views' lock held) only when there is a view."""
        with self.lock:
            self.last_flush = time.monotonic()
            if not self._views:
                return
            snapshot = take_snapshot()
            for view in list(self._views):
                _safely(view.update, snapshot)

    def finish(self, take_snapshot: Callable[[], Any]) -> None:
        """The final summary in every view."""
        with self.lock:
            snapshot = take_snapshot()
            for view in self._views:
                _safely(view.finish, snapshot)


class Waits:
    """The ``wait()`` calls under way on a run or a cell: each refreshes the views itself (from the notebook's
    thread, tied to its cell) and leaves the final summary, so the loop leaves the views alone meanwhile."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    @property
    def any(self) -> bool:
        with self._lock:
            return self._count > 0

    @contextlib.contextmanager
    def coming(self) -> Iterator[None]:
        """A ``wait()`` follows (``--block`` shows the cell's view, then waits): a cell that ends in between leaves
        its final summary to that wait, as during it (else its view was finished twice, once without the error
        below it: the traceback showed twice, test_a_failed_session_cell_shows_its_traceback_once)."""
        with self._lock:
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1

    def wait(self, done: threading.Event, timeout: float | None, interval: float, tick: Callable[[], None],
             echo: Any, snapshot: Callable[[], Any], finish: Callable[[], None]) -> bool:
        """Block until ``done`` (True) or ``timeout`` (False), ``tick`` every ``interval`` seconds; then the
        ``echo``'s last lines (a ``WorkerEcho``, or None) and, once ended, ``finish`` (the final summary)."""
        with self._lock:
            self._count += 1
        try:
            ended = wait_for(done, timeout, interval, tick)
            if echo is not None:
                echo.finish(snapshot()) if ended else echo.tick(snapshot())
            if ended:
                finish()
        finally:
            with self._lock:
                self._count -= 1
        return ended


def wait_for(done: threading.Event, timeout: float | None, interval: float, tick: Callable[[], None]) -> bool:
    """Block until ``done`` (True) or ``timeout`` seconds (False), calling ``tick`` every ``interval`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not done.is_set():
        left = interval
        if deadline is not None:
            left = min(left, deadline - time.monotonic())
            if left <= 0:
                break
        done.wait(left)
        tick()
    return done.is_set()


def final_snapshot(snapshot: ClusterSnapshot, error_below: bool, echoed: bool) -> ClusterSnapshot:
    """The snapshot of the final summary: ``error_below``, a ``RunFailed`` with the traceback is raised below it
    (not shown twice); ``echoed``, the workers' output is in the cell already (the tail is not repeated)."""
    if error_below:
        snapshot = mark_error_below(snapshot)
    if echoed:
        snapshot = {**snapshot, ECHOED_KEY: True}  # type: ignore[typeddict-unknown-key]
    return snapshot


def state_file_data(snapshot: ClusterSnapshot, procs: list[WorkerHandle], run_id: str) -> dict[str, Any]:
    """``state.json``'s content: the snapshot with the processes (for the reaper and the REST API's stop),
    without the metric history, metrics as strict JSON."""
    data: dict[str, Any] = dict(snapshot)
    data["hostname"] = socket.gethostname()
    data["host_pids"] = [p.host.pid for p in procs]
    data["worker_pgids"] = [p.worker_pid for p in procs if p.worker_pid]
    data["processes"] = [[pid, created] for p in procs for pid, created in p.processes()]  # what may be signalled
    data["run_id"] = run_id
    if data.get("kernel_pid") == os.getpid():  # the kernel's start: a pid reused since is not its (liveness.py)
        data["kernel_started"] = started_since_boot(os.getpid())
    for worker in data["workers"]:
        worker.pop("history", None)
        worker["metrics"] = wire.encode_metrics(worker.get("metrics") or {})  # strict JSON for the REST API
    return data


def read_logs(run_dir: Path, count: int, worker: int | None = None, tail: int | None = None) -> str:
    """A worker's full log (or every one of the ``count`` workers' logs, each line prefixed by its index);
    ``tail`` keeps the last lines. As a terminal shows it: escape codes stripped, a progress bar's updates collapsed
    to the last (``protocol/terminal.py``; the file keeps every byte)."""
    parts = []
    for i in range(count) if worker is None else [worker]:
        try:
            text = log_path(run_dir, i).read_bytes().decode("utf-8", errors="replace")  # "\r" kept: not read_text
        except OSError:
            text = ""
        lines = settled_lines(text)
        if tail is not None:
            lines = lines[-tail:]
        parts.append("\n".join(f"[{i}] {line}" for line in lines) if worker is None else "\n".join(lines))
    return "\n".join(parts)


def _safely(call: Callable[[Any], Any], snapshot: Any) -> None:
    try:
        call(snapshot)
    except Exception:  # a broken view must not take the run down
        traceback.print_exc(file=sys.__stderr__)
