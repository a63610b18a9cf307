"""What the session core (``cells.py``) keeps: each cell's record and the session's grace periods (pure data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nbworkers.magics.sessions.core.events import WorkerEnd
from nbworkers.protocol.statuses import CellState

# Seconds after every worker ended a cell that its end markers (the cell's last output, through each worker's host)
# may still take: they come within milliseconds on a quiet machine; beside six busy processes (make soak) 1 s was
# not enough and the cell ended without its last lines. Only a marker that never comes waits this long.
LOG_CLOSE_WAIT = 10.0
SAVE_WAIT = 120.0  # seconds the workers get to save their namespaces before a restart (session_save_wait)


@dataclass(frozen=True)
class SessionTimings:
    """The session's grace periods, in seconds (``magics/settings.py``'s ``session_*``)."""

    peer_grace: float = 10.0
    abort_grace: float = 30.0
    interrupt_grace: float = 30.0
    pause_wait: float = 2.0
    log_close_wait: float = LOG_CLOSE_WAIT
    save_wait: float = SAVE_WAIT

    @classmethod
    def from_settings(cls, settings: Any) -> SessionTimings:
        return cls(peer_grace=settings.session_peer_grace, abort_grace=settings.session_abort_grace,
                   interrupt_grace=settings.session_interrupt_grace, pause_wait=settings.session_pause_wait,
                   save_wait=settings.session_save_wait)


RESTORE_LABEL = "restore"  # what the views call the restore cell (not its code, not a user's cell number)


@dataclass
class CellRecord:
    """What the core knows about one cell (times are the core's clock)."""

    number: int  # every submitted cell's, in order: what the workers and the session's ``cells`` go by
    timeout: float | None = None
    shown: int | None = None  # the user's cell number ("cell 3"); None: a cell nbworkers runs itself
    prompt: int | None = None  # the notebook's execution count of the cell that submitted it (its ``[5]``), if any
    label: str = ""  # such a cell's name ("restore")
    state: CellState = CellState.QUEUED
    error: str = ""
    failed_workers: tuple[int, ...] = ()
    started_at: float | None = None
    interrupts: int = 0  # Stop requests seen
    timed_out: bool = False  # --timeout passed: the interrupted cell counts as failed
    interrupted_at: float | None = None
    pausing: set[int] = field(default_factory=set)  # workers with training steps that will pause at the next one
    paused: dict[int, int] = field(default_factory=dict)  # worker -> its step count when it paused for a Stop
    resumed: bool = False  # the Stop's resume(stop_at) (or plain interrupt) was sent
    first_error_at: float | None = None
    first_error_worker: int | None = None
    all_ended_at: float = 0.0  # when every worker's end message was in
    aborted_at: float | None = None
    ends: dict[int, WorkerEnd] = field(default_factory=dict)  # worker -> its ``cell end``
    closed_logs: set[int] = field(default_factory=set)  # workers whose end marker line arrived

    @property
    def ref(self) -> str | None:
        """The user's name for the cell's number: the notebook's ``[5]`` where a notebook cell submitted it, else the
        session's own count ("3"); None: a cell nbworkers runs itself."""
        if self.shown is None:
            return None
        return f"[{self.prompt}]" if self.prompt is not None else str(self.shown)

    @property
    def title(self) -> str:
        """What every message calls the cell: "cell [5]" (the notebook's number), "cell 3" (the session's count, a
        cell submitted from Python), or nbworkers' own cell by what it does ("restore")."""
        return self.label or f"cell {self.ref or self.number}"


def cells_phrase(refs: list[str]) -> str:
    """How a message names user cells by their ``ref``: "cell [5]", "cells [3] and [5]"; cells numbered by the
    session (submitted from Python, not a notebook's [N]) say so: "session cell 2", "session cells 1 and 3"."""
    prefix = "" if refs and all(ref.startswith("[") for ref in refs) else "session "
    if len(refs) == 1:
        return f"{prefix}cell {refs[0]}"
    return f"{prefix}cells {', '.join(refs[:-1])} and {refs[-1]}"
