"""Which workers' lines a blocking cell shows: worker 0's, and another worker's only where it differs.

Every worker runs the same code, so most lines come N times ("Epoch 1/2", ``model.summary()``): the cell shows
worker 0's copy. A line of worker i > 0 that worker 0 printed too (the same text, counted: three equal lines
need three) is not shown; one worker 0 has not printed (yet) waits ``hold`` seconds for it, then is shown as
worker i's own. Lines come from different processes at different times, so the match is by text, not by
position. Pure: the caller gives the time (``now``), so tests need no clock.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field


@dataclass
class _Other:
    unmatched_first: Counter[str] = field(default_factory=Counter)  # worker 0's lines this worker has not printed
    held: deque[tuple[float, str]] = field(default_factory=deque)  # this worker's lines worker 0 has not printed


class LineDeduper:
    def __init__(self, hold: float, first: int = 0):
        self.hold = hold
        self.first = first  # the worker whose output is shown whole
        self._others: dict[int, _Other] = {}
        self.hidden = 0  # lines not shown because worker 0 showed them

    def feed(self, worker: int, lines: list[str], now: float) -> list[str]:
        """Worker ``worker``'s new lines; returns the ones to show now (of that worker: the held ones of others
        come out of ``due``)."""
        if worker == self.first:
            for line in lines:
                for other in self._others.values():
                    if not self._take_held(other, line):
                        other.unmatched_first[line] += 1
            return list(lines)
        other = self._others.setdefault(worker, _Other())
        for line in lines:
            if other.unmatched_first[line] > 0:
                other.unmatched_first[line] -= 1
                self.hidden += 1
            else:
                other.held.append((now, line))
        return []

    def note_worker(self, worker: int) -> None:
        """Worker ``worker`` (not the first) exists: worker 0's lines from now on are matched against its."""
        if worker != self.first:
            self._others.setdefault(worker, _Other())

    def due(self, now: float, final: bool = False) -> dict[int, list[str]]:
        """Held lines whose wait is over (every one when ``final``), per worker, in their order."""
        out: dict[int, list[str]] = {}
        for worker, other in sorted(self._others.items()):
            lines = []
            while other.held and (final or now - other.held[0][0] >= self.hold):
                lines.append(other.held.popleft()[1])
            if lines:
                out[worker] = lines
        return out

    def _take_held(self, other: _Other, line: str) -> bool:
        for at, (_, held) in enumerate(other.held):
            if held == line:
                del other.held[at]
                self.hidden += 1
                return True
        return False
