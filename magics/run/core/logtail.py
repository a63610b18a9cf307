"""A bounded tail of a worker's log, with ``\\r`` progress-bar redraws collapsed to their last state.

Bounded both ways: at most ``maxlen`` lines, each at most ``max_line_chars`` characters (a line without a newline
would otherwise grow without limit: in the kernel, the widget and state.json); a cut line keeps its head and
ends with ``CUT_NOTE`` (``protocol/lines.py``). The log file on disk keeps everything."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from nbworkers.protocol import env_settings
from nbworkers.protocol.lines import CUT_NOTE, DEFAULT_TAIL_LINES, cap_line

__all__ = ["CUT_NOTE", "DEFAULT_TAIL_LINES", "LogTail", "cap_line"]

DEFAULT_MAX_LINE_CHARS = env_settings.MAX_LINE_CHARS.default


class LogTail:
    def __init__(self, maxlen: int = DEFAULT_TAIL_LINES, max_line_chars: int = DEFAULT_MAX_LINE_CHARS):
        self._lines: deque[str] = deque(maxlen=maxlen)
        self.max_line_chars = max_line_chars
        self._cut = False  # the open line was cut: the rest of it is dropped until its newline
        self._open = False  # the last line has no newline yet (a progress bar being redrawn)
        self._rewind = False  # a carriage return came: the next text overwrites the open line
        self.total = 0  # complete lines seen

    def feed(self, chunks: list[str]) -> None:
        """Add relayed pieces of output; a piece need not end in a newline. ``\\r`` rewinds the line."""
        for chunk in chunks:
            for piece in _pieces(chunk):
                ended = piece.endswith("\n")
                for j, segment in enumerate(piece.rstrip("\n").split("\r")):
                    if j > 0:
                        self._rewind = True
                    if not segment:
                        continue
                    if self._open and self._lines:
                        if self._rewind:
                            self._lines[-1], self._cut = self._capped(segment)
                        elif not self._cut:
                            self._lines[-1], self._cut = self._capped(self._lines[-1] + segment)
                    else:
                        line, self._cut = self._capped(segment)
                        self._lines.append(line)
                        self._open = True
                    self._rewind = False
                if ended:
                    if not self._open:
                        self._lines.append("")
                    self._open = self._rewind = self._cut = False
                    self.total += 1

    def _capped(self, text: str) -> tuple[str, bool]:
        if len(text) <= self.max_line_chars:
            return text, False
        return cap_line(text, self.max_line_chars), True

    def lines(self) -> list[str]:
        return list(self._lines)

    @property
    def open(self) -> bool:
        """The last line has no newline yet (a progress bar being redrawn)."""
        return self._open

    def __len__(self) -> int:
        return len(self._lines)


def _pieces(chunk: str) -> Iterator[str]:
    """Split on newlines only (str.splitlines would also split on \\r), keeping the newline."""
    start = 0
    while start < len(chunk):
        end = chunk.find("\n", start)
        end = len(chunk) if end == -1 else end + 1
        yield chunk[start:end]
        start = end
