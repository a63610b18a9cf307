"""A failed session cell's message, read in one glance: which worker failed and with what (its first line), then
a short list (what was lost, what is kept, the one thing to run, with the session cell numbers), then the
worker's traceback once, last. Pure text; ``SessionCore`` (cells.py) composes it, the views show it as it is."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from nbworkers.magics.sessions.core.events import WorkerEnd
from nbworkers.magics.sessions.core.records import CellRecord
from nbworkers.protocol.statuses import CellEnd, CellState

TRACEBACK_START = "Traceback (most recent call last):"  # the widget splits the error there too (widget_cards.js)
_TRACEBACK_LINE = re.compile(r"^Traceback\b", re.M)  # where a worker's traceback starts in an error


def with_notes(error: str, notes: Iterable[str]) -> str:
    """``error`` ("worker 1: ValueError: ...", maybe its traceback) with ``notes`` as list items ("- kept: ...")
    between its first lines and its traceback; a note's own lines become items too."""
    found = _TRACEBACK_LINE.search(error)
    head, traceback = (error[:found.start()], error[found.start():]) if found else (error, "")
    items = [line if line.startswith("- ") else f"- {line}"
             for note in notes for line in note.splitlines() if line.strip()]
    return "\n".join(part for part in (head.rstrip(), *items, traceback.rstrip()) if part)


def nothing_lost(rerun: str, live_cells: str) -> str:
    """The notes of a failed cell whose processes did not restart: every variable is as it was. ``rerun``: what
    runs the cell again ("session cell 3")."""
    return (f"nothing was lost: no process restarted, the variables of {live_cells} are kept\n"
            f"- run: {rerun} again once it is fixed")


def stop_note(cell: CellRecord) -> str:
    """What a Stop did, as the cell shows it: "stopped by you at step N", N the last step a stopped worker
    reported (they stop at the same one); the traceback stays in the workers' logs."""
    steps = [end.step for end in cell.ends.values() if end.status == CellEnd.INTERRUPTED and end.step is not None]
    return f"stopped by you at step {max(steps)}" if steps else "stopped by you"


def peer_aborted(end: WorkerEnd, worker: int, failed: int | None) -> WorkerEnd:
    """``worker``'s end as its card reads it. When its collectives were aborted because worker ``failed`` raised,
    what the abort made TensorFlow raise in it (``UnavailableError``, a ``KeyboardInterrupt``, pybind11's
    "MISMATCH of original and normalized active exception types", through frames of nbworkers' own modules) is
    not its error: it was interrupted, "aborted: worker N failed" (the worker's log keeps its traceback)."""
    if not end.aborted or end.status == CellEnd.OK or failed is None or failed == worker:
        return end
    return replace(end, status=CellEnd.INTERRUPTED, error=f"aborted: worker {failed} failed", traceback="")


def error_text(cell: CellRecord) -> str:
    """A failed cell's error: the first failing worker's message and traceback, then the others: interrupted
    because of it (a Stop's KeyboardInterrupt, aborted collectives), failed the same way, or failed too with
    their own error."""
    worker = cell.first_error_worker
    end = cell.ends.get(worker) if worker is not None else None
    if end is None:
        return cell.error or CellState.FAILED.value  # no message: it says that it failed
    ends = {w: e for w, e in sorted(cell.ends.items()) if w != worker and e.status != CellEnd.OK}
    interrupted = [w for w, e in ends.items() if e.status != CellEnd.ERROR]
    same = [w for w, e in ends.items() if e.status == CellEnd.ERROR and e.error == end.error]
    notes = [f"{workers_text(interrupted)} {'was' if len(interrupted) == 1 else 'were'} interrupted because of it"
             ] if interrupted else []
    notes += [f"{workers_text(same)} failed the same way"] if same else []
    notes += [f"worker {w} failed too: {e.error or 'error'}" for w, e in ends.items()
              if e.status == CellEnd.ERROR and w not in same]
    return with_notes(f"worker {worker}: {end.error or 'error'}\n{end.traceback or ''}", notes)


def workers_text(items: Iterable[int]) -> str:
    """"worker 1" or "workers 0, 2"."""
    items = list(items)
    return ("worker " if len(items) == 1 else "workers ") + ", ".join(str(i) for i in items)
