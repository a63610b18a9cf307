"""A fake of the session a detached session's supervisor serves (magics/sessions/detach/handlers.py's
``ServedSession``): tests/unit/test_sessions_detach.py and test_notebook_detached_session.py serve it over a real
Unix socket."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from nbworkers.magics.sessions.session import RESTORE_CELL, RESTORE_LABEL, NothingToRestore
from nbworkers.magics.views.rich import RichItem


class SessionEnded(RuntimeError):  # the handlers know the session's refusal by its class name
    pass


class FakeCell:
    def __init__(self, number: int, code: str, label: str = ""):
        self.number, self.code, self.label = number, code, label or f"cell {number}"
        self.state, self.error, self.failed_workers, self.outputs_dropped = "queued", "", (), 0
        self.outputs: list[RichItem] = []
        self.results: dict[int, RichItem] = {}
        self.done = False

    def snapshot(self) -> dict[str, Any]:
        return {"name": f"s cell {self.number}", "status": self.state, "workers": [{"index": 0, "log_tail": ["hi"]}],
                "session": {"name": "s", "cell": self.number}, "metric": float("nan")}

    def failure_text(self) -> str:
        return f"session 's' cell {self.number} failed: {self.error}"

    def finish(self, state: str = "finished", error: str = "") -> None:
        self.state, self.error = state, error
        if state == "finished":
            self.results = {0: RichItem(0, {"text/plain": "42"})}
        else:
            self.failed_workers = (1,)
        self.done = True


class FakeSession:
    name = "s"

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.cells: list[FakeCell] = []
        self.status, self.busy, self.lost_note = "running", False, ""
        self.pushed: list[tuple[Any, dict[str, Any]]] = []
        self.interrupted: list[Any] = []
        self.ended = False
        self.saved = False  # whether the workers saved something before a restart (restore() refuses without)

    def submit(self, code: str, timeout: float | None = None, display: str = "0", label: str = "",
               prompt: int | None = None) -> FakeCell:
        if self.ended:
            raise SessionEnded("session 's' is stopped: start it again")
        self.cells.append(FakeCell(len(self.cells) + 1, code, label or (f"cell [{prompt}]" if prompt else "")))
        return self.cells[-1]

    def restore(self) -> FakeCell:
        if not self.saved:
            raise NothingToRestore("session 's' saved nothing to restore: it saves ... after one worker's error.")
        return self.submit(RESTORE_CELL, label=RESTORE_LABEL)

    def interrupt(self, cell: Any = None) -> str:
        self.interrupted.append(cell)
        return "interrupting"

    def pull(self, expression: str, worker: int = 0, timeout: float | None = None) -> Any:
        if expression == "boom":
            raise RuntimeError("worker 0: NameError: name 'boom' is not defined")
        return {"x": 41, "w": np.arange(6, dtype=np.float32).reshape(2, 3)}

    def push(self, workers: list[int] | None = None, allow_pickle: bool = False, **values: Any) -> list[int]:
        self.pushed.append((workers, values))
        return workers or [0, 1]

    def live_cells(self) -> str:
        return "cells 1-2"
