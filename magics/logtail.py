"""A bounded tail of a worker's log, with ``\\r`` progress-bar redraws collapsed to their last state."""

from __future__ import annotations

from collections import deque

DEFAULT_TAIL_LINES = 300


class LogTail:
    def __init__(self, maxlen: int = DEFAULT_TAIL_LINES):
        self._lines: deque[str] = deque(maxlen=maxlen)
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
                        self._lines[-1] = segment if self._rewind else self._lines[-1] + segment
                    else:
                        self._lines.append(segment)
                        self._open = True
                    self._rewind = False
                if ended:
                    if not self._open:
                        self._lines.append("")
                    self._open = self._rewind = False
                    self.total += 1

    def lines(self) -> list[str]:
        return list(self._lines)

    def __len__(self) -> int:
        return len(self._lines)


def _pieces(chunk: str):
    """Split on newlines only (str.splitlines would also split on \\r), keeping the newline."""
    start = 0
    while start < len(chunk):
        end = chunk.find("\n", start)
        end = len(chunk) if end == -1 else end + 1
        yield chunk[start:end]
        start = end
