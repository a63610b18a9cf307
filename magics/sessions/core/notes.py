"""A failed session cell's message, read in one glance: which worker failed and with what (its first line), then
a short list (what was lost, what is kept, the one thing to run, with the session cell numbers), then the
worker's traceback once, last. Pure text; ``SessionCore`` (cells.py) composes it, the views show it as it is."""

from __future__ import annotations

import re
from collections.abc import Iterable

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
