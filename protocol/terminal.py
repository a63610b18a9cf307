"""A worker's output as a terminal (or a Jupyter cell) shows it: one place for what its control characters become.

Workers write for a terminal: Keras' progress bar (verbose=1) colours its text with ANSI escape codes
(``\\x1b[1m150/150\\x1b[0m \\x1b[32m━━━\\x1b[0m``), and redraws its line by backspacing over it and returning
the carriage (``\\b\\b…\\r``); tqdm redraws with ``\\r``. Every view of a worker's output reads it through here:

- ``TerminalStream`` for relayed output, chunk by chunk (the kernel's noise filter, ``magics/run/noise.py``, for
  the widget's log panel, the summaries, a blocking cell's echo and a session cell's output): the escape codes
  and other control characters go (a code cut between two chunks is held until its end comes), backspaces
  rub out what they follow; a carriage return stays, so the log tail (``magics/run/core/logtail.py``) can
  replace the open line with its newest update.
- ``settled_lines`` for a log file read whole (``%workers logs``, the REST API and the sidebar's Log panel): the
  same, and each line's carriage-return updates collapsed to the last one, as a Jupyter cell shows the same
  output (``\\r`` starts the line over; a line ended by ``\\r`` alone keeps what it showed).

The log files on disk keep every byte. Pure Python: the kernel and the server import it.
"""

from __future__ import annotations

import re

# CSI (colours, cursor moves: ESC [ params final), OSC (titles, links: ESC ] ... BEL or ESC \), DCS/SOS/PM/APC
# strings (ESC P/X/^/_ ... ESC \), and two-character escapes (ESC 7, ESC c, ...: any other final character)
ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[PX^_][^\x1b]*\x1b\\|[0-OQ-WYZ\\`-~])")
# what may still become an escape code when more output comes (a chunk ended inside one)
OPEN_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[PX^_][^\x1b]*\x1b?)?\Z")
OPEN_ESCAPE_CHARS = 4096  # longer than this, it is not a code: the ESC goes, the text stays
# control characters a view never shows (tab, newline, carriage return and backspace are dealt with apart)
CONTROL = re.compile(r"[\x00-\x07\x0b\x0c\x0e-\x1f\x7f]")


def strip_codes(text: str) -> str:
    """``text`` without escape codes and control characters other than tab, newline, ``\\r`` and ``\\b``."""
    if "\x1b" in text:
        text = ESCAPE.sub("", text)
    return CONTROL.sub("", text)


def rub_out(text: str) -> str:
    """Backspaces applied: each takes back the character before it on its line (none left: it does nothing)."""
    if "\b" not in text:
        return text
    out: list[str] = []
    for char in text:
        if char != "\b":
            out.append(char)
        elif out and out[-1] not in "\n\r":
            out.pop()
    return "".join(out)


def settled_line(line: str) -> str:
    """One line (without its newline) as it ends up on the screen: its last non-empty carriage-return update."""
    line = rub_out(line)
    if "\r" not in line:
        return line
    updates = [update for update in line.split("\r") if update]
    return updates[-1] if updates else ""


def settled_lines(text: str) -> list[str]:
    """A log file's text as the user reads it: codes stripped, one line per finished update (``settled_line``)."""
    text = strip_codes(text).replace("\r\n", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the text ended with a newline
    return [settled_line(line) for line in lines]


class TerminalStream:
    """One worker's relayed output, chunk by chunk: escape codes and control characters out, backspaces applied
    inside a chunk (a backspace at a chunk's head is dropped: the carriage return that follows Keras' backspaces
    starts the line over anyway); carriage returns kept for the log tail."""

    def __init__(self) -> None:
        self._held = ""  # the start of an escape code a chunk ended in

    def feed(self, chunk: str) -> str:
        text = self._held + chunk
        self._held = ""
        if "\x1b" in text:
            text = ESCAPE.sub("", text)
            start = text.find("\x1b", max(0, len(text) - OPEN_ESCAPE_CHARS))
            while start != -1 and not OPEN_ESCAPE.match(text, start):  # the first ESC that may begin a code
                start = text.find("\x1b", start + 1)
            if start != -1:
                text, self._held = text[:start], text[start:]
        return rub_out(CONTROL.sub("", text))

    def flush(self) -> str:
        """What is held (the end of the output: an escape code that never ended), without its ESC."""
        held, self._held = self._held, ""
        return strip_codes(held)
