"""Cutting an output line that is too long: one function for the host, the kernel's log tails and the views.

A worker can print a line without end (a progress bar without newline, a huge repr). Every place that holds or
shows output bounds its lines with ``cap_line``: the worker host before the relay (``host/worker_host.py``, over a
stream), the kernel's log tail and relay (``magics/run/core/logtail.py``, ``magics/run/relay.py``), and the views
(widget, blocking echo, summary) with the short note. The log file on disk always keeps every byte.

Pure Python: the host, the kernel and the workers import it.
"""

from __future__ import annotations

DEFAULT_TAIL_LINES = 300  # log lines per worker a view keeps (the default of the kernel setting log_tail_lines)
CUT_NOTE = " [… line cut by nbworkers at {limit} characters; the log file has all of it]"  # where the line is kept
SHORT_CUT_NOTE = " …[cut]"  # in a view that already shows its limit nowhere and whose line is kept in the kernel


def cut_note(limit: int) -> str:
    """The note that ends a line cut at ``limit`` characters (held data: the log tail, the relay)."""
    return CUT_NOTE.format(limit=limit)


def cap_line(text: str, limit: int, note: str = CUT_NOTE) -> str:
    """``text`` cut to ``limit`` characters plus ``note`` (``{limit}`` in it filled in) when longer."""
    return text if len(text) <= limit else text[:max(limit, 0)] + note.format(limit=limit)
