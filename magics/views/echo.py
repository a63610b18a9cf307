"""The workers' printed lines in a blocking cell's own output, prefixed ``[0]``, ``[1]`` as ``%%px`` does.

A blocking wait (``%%worker --block``, ``%workers wait``) runs on the kernel's main thread, tied to the cell, so
what it writes to ``sys.stdout`` lands in that cell: in a headless run's saved notebook and in every static
renderer as plain text. It is bounded so the cell stays readable and jupyter_server's output rate limits
(1000 messages/s, 1 MB/s) are never near: at most ``echo_lines`` lines per worker as they come, then only a
count; when the run ends, a note of what was cut and the last ``echo_tail_lines`` lines of each worker whose
output was cut. Lines longer than ``echo_line_chars`` are cut. Writes happen once per wait tick (at most every
``flush_interval``), one write for all workers. The full logs stay on disk.

Each line once: the cell shows worker 0's lines and another worker's only where they differ (``dedupe.py``; the
setting ``echo_all_workers`` shows them all); a traceback is always shown. nbworkers' own marker lines
(``--- nbworkers: ...``: forked from a zygote, launch, cell start/end) stay in the log files.

A worker's traceback is shown once: the echo holds a ``Traceback (most recent call last)`` block back; if the
worker then failed, the block is left to the run's summary / ``RunFailed`` (a one-line note says so), else it is
written after ``echo_traceback_hold`` seconds (a handled exception the worker logged and went on from).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from nbworkers.magics.settings import settings
from nbworkers.magics.shapes import ClusterSnapshot, WorkerSnapshot
from nbworkers.magics.views.dedupe import LineDeduper
from nbworkers.protocol.lines import SHORT_CUT_NOTE, cap_line
from nbworkers.protocol.statuses import WorkerStatus

TRACEBACK_START = "Traceback (most recent call last)"
MARKER_START = "--- nbworkers: "  # nbworkers' own lines in a worker's output (the log keeps them)


@dataclass
class _WorkerEcho:
    next_line: int = 0  # the global index (LogTail.total) of the next complete line to consider
    shown: int = 0
    cut: int = 0  # lines past echo_lines not shown live
    lost: int = 0  # lines that left the kernel's tail before a tick saw them
    cut_lines: list[str] = field(default_factory=list)  # the newest cut lines (for the closing tail)
    held: list[str] = field(default_factory=list)  # a traceback held back (see the module docstring)
    held_since: float = 0.0


def blocking_echo() -> WorkerEcho | None:
    """The echo a blocking wait (``--block``, ``%workers wait``, a session cell) writes with, from the settings;
    None when ``echo_lines`` is 0."""
    config = settings()
    if config.echo_lines <= 0:
        return None
    return WorkerEcho(config.echo_lines, config.echo_tail_lines,
                      dedupe_hold=None if config.echo_all_workers else config.echo_dedupe_hold)


class WorkerEcho:
    def __init__(self, max_lines: int, tail_lines: int, out: TextIO | None = None, dedupe_hold: float | None = None):
        self.max_lines = max(0, max_lines)
        self.tail_lines = max(0, tail_lines)
        config = settings()
        self.line_chars = config.echo_line_chars
        self.traceback_hold = config.echo_traceback_hold  # seconds a traceback waits for its worker's status
        self._out = out
        self._workers: dict[int, _WorkerEcho] = {}
        self._dedupe = LineDeduper(dedupe_hold) if dedupe_hold is not None else None  # None: every worker's lines
        self.written = 0  # lines written (tests)

    def _stream(self) -> TextIO:
        return self._out or sys.stdout

    def tick(self, snapshot: ClusterSnapshot) -> None:
        """Write each worker's complete lines that arrived since the last tick (bounded)."""
        out: list[str] = []
        workers = self._note(snapshot)
        for worker in workers:
            out.extend(self._new_lines(worker))
        out.extend(self._due(final=False))
        self._write(out)

    def _note(self, snapshot: ClusterSnapshot) -> list[WorkerSnapshot]:
        workers = list(snapshot.get("workers") or [])
        if self._dedupe is not None:
            for worker in workers:
                self._dedupe.note_worker(worker.get("index", 0))
        return workers

    def _due(self, final: bool) -> list[str]:
        """Other workers' lines held for worker 0's copy that did not come: shown as theirs."""
        if self._dedupe is None:
            return []
        out = []
        for index, lines in self._dedupe.due(time.monotonic(), final).items():
            out.extend(self._emit(index, self._workers.setdefault(index, _WorkerEcho()), lines))
        return out

    def finish(self, snapshot: ClusterSnapshot) -> None:
        """The last lines, an unfinished last line, and per worker a note of what was cut plus its last lines."""
        out: list[str] = []
        workers = self._note(snapshot)
        for worker in workers:
            out.extend(self._new_lines(worker, final=True))
        out.extend(self._due(final=True))
        left: list[int] = []  # failed workers whose traceback the run's error shows
        for worker in workers:
            state = self._workers[worker.get("index", 0)]
            if state.held and worker.get("status") == WorkerStatus.FAILED:
                left.append(worker.get("index", 0))
                state.held = []
            out.extend(self._emit(worker.get("index", 0), state, self._release(state)))
        if left:
            who = "".join(f"[{i}]" for i in left)
            out.append(f"{who} (traceback not repeated here: see the run's error)")
        for worker in snapshot.get("workers") or []:
            index = worker.get("index", 0)
            seen = self._workers.get(index)
            if seen is None or not (seen.cut or seen.lost):
                continue
            parts = []
            if seen.cut:
                parts.append(f"{seen.cut} lines not shown here")
            if seen.lost:
                parts.append(f"{seen.lost} lines went by too fast to show")
            where = f"; full log: {worker['log_path']}" if worker.get("log_path") else ""
            tail = seen.cut_lines[-self.tail_lines:] if self.tail_lines else []
            last = f", its last {len(tail)} below" if tail else ""
            out.append(f"[{index}] ... {', '.join(parts)}{last}{where}")
            out.extend(f"[{index}] {line}" for line in tail)
        self._write(out)

    def _new_lines(self, worker: WorkerSnapshot, final: bool = False) -> list[str]:
        index = worker.get("index", 0)
        state = self._workers.setdefault(index, _WorkerEcho())
        lines = list(worker.get("log_tail") or [])
        total = worker.get("log_total")
        if total is None:  # an older snapshot: no line count, treat the tail as all there is
            total = len(lines)
        is_open = bool(worker.get("log_open")) and bool(lines)
        complete = lines[:-1] if is_open else lines
        first = total - len(complete)  # global index of complete[0]
        if state.next_line < first:
            state.lost += first - state.next_line
            state.next_line = first
        fresh = complete[state.next_line - first:]
        state.next_line = total
        if final and is_open:
            fresh.append(lines[-1])
            state.next_line += 1  # never shown twice
        ready = []
        errors: list[str] = []  # a released traceback: always shown, never matched against worker 0's
        for line in fresh:
            if line.startswith(MARKER_START):
                continue
            if not state.held and TRACEBACK_START in line:
                state.held_since = time.monotonic()
            if state.held or TRACEBACK_START in line:
                state.held.append(line)
            else:
                ready.append(line)
        if state.held and not final and worker.get("status") != WorkerStatus.FAILED \
                and time.monotonic() - state.held_since > self.traceback_hold:
            errors = self._release(state)
        if self._dedupe is not None:
            ready = self._dedupe.feed(index, ready, time.monotonic())
        return self._emit(index, state, ready + errors)

    @staticmethod
    def _release(state: _WorkerEcho) -> list[str]:
        held, state.held = state.held, []
        return held

    def _emit(self, index: int, state: _WorkerEcho, fresh: list[str]) -> list[str]:
        out = []
        for line in fresh:
            line = cap_line(line, self.line_chars, SHORT_CUT_NOTE)
            if state.shown < self.max_lines:
                out.append(f"[{index}] {line}")
                state.shown += 1
            else:
                state.cut += 1
                state.cut_lines.append(line)
                del state.cut_lines[:-max(self.tail_lines, 1)]
        return out

    def _write(self, lines: list[str]) -> None:
        if not lines:
            return
        stream = self._stream()
        stream.write("\n".join(lines) + "\n")
        stream.flush()
        self.written += len(lines)
