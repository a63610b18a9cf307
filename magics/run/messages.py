"""What a relay message from a worker means, read once: typed events for the run core and for a run's participants.

As anywidget's ``_protocols.py`` names each message kind, this is the one place that reads a relay message's
fields. A message of an earlier launch generation is stale and one naming a worker the run does not have is
malformed: both are dropped and counted by the shell (the relay's ``DropCounts``). What is left becomes typed events:

- the run core's (magics/run/core/events.py): ``Logged``, ``Metrics``, ``StatusReported``, ``Hello``; a participant
  sees these too (a session's running cell shows its workers' metrics and statuses);
- a participant's (a session's: magics/sessions/participant.py makes them its core's events): a cell's progress
  (``CellStarted``, ``CellPausing``, ``CellPaused``, ``CellSaved``, ``CellEnded``), its rich output (``Displayed``)
  and the worker's output with the cell markers a session routes it by (``WorkerOutput``).

Log lines go through the worker's one noise filter (nbworkers' bookkeeping lines, TensorFlow's C++ start-up chatter:
magics/run/noise.py); the run's views leave the cell markers out too, a session's cells route by them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Union

from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.noise import CELL_MARKER, NoiseFilter, is_own_line
from nbworkers.magics.run.relay import Message
from nbworkers.protocol.statuses import CellEnd


@dataclass(frozen=True)
class WorkerOutput:
    """A worker's output as its cells see it: noise filtered out, the cell markers kept (a session routes by them)."""

    worker: int
    text: str


@dataclass(frozen=True)
class CellStarted:
    worker: int
    cell: int


@dataclass(frozen=True)
class CellPausing:
    """A Stop found the worker inside a step: it pauses at the step's end."""

    worker: int
    cell: int


@dataclass(frozen=True)
class CellPaused:
    worker: int
    cell: int
    step: int


@dataclass(frozen=True)
class CellSaved:
    """What a worker saved before a restart (``protocol/session_wire.py`` checked the entries' fields)."""

    worker: int
    saved: tuple[tuple[str, str, str], ...] = ()  # (name, kind, detail)
    skipped: tuple[tuple[str, str], ...] = ()  # (name, why)
    folder: str = ""
    error: str = ""
    built_in: tuple[tuple[str, int], ...] = ()  # (name, the cell that last bound it)


@dataclass(frozen=True)
class CellEnded:
    worker: int
    cell: int
    status: CellEnd
    error: str = ""
    traceback: str = ""
    aborted: bool = False
    t: float | None = None
    step: int | None = None


@dataclass(frozen=True)
class Displayed:
    """A worker's rich output (a MIME bundle, not yet checked against the limits)."""

    worker: int
    cell: int
    source: str
    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)


Relayed = Union[WorkerOutput, CellStarted, CellPausing, CellPaused, CellSaved, CellEnded, Displayed]


class Translator:
    """A run's relay messages as events (``events``), with each worker's noise filter and place in its output."""

    def __init__(self, level: int, workers: int):
        self.level = level
        self._noise = [NoiseFilter(level) for _ in range(workers)]
        self._line_start = [True] * workers  # the run's lines: where each worker's filtered output is

    def new_generation(self, workers: int) -> None:
        """A new launch (``workers`` of them): its processes' output starts afresh; the hidden lines still count."""
        hidden = [noise.dropped for noise in self._noise] + [0] * workers
        self._noise = [NoiseFilter(self.level) for _ in range(workers)]
        for noise, count in zip(self._noise, hidden):
            noise.dropped = count
        self._line_start = [True] * workers

    def events(self, message: Message, generation: int, node_label: Callable[[int], str]
               ) -> tuple[list[ev.Event | Relayed], tuple[str, str] | None]:
        """(the events, None), or ([], (drop reason, detail)). ``node_label(index)``: the worker's machine as its
        backend knows it ("" when the worker's own host name will do)."""
        content = message.content
        if content["gen"] != generation:
            return [], ("stale", f"generation {content['gen']}")
        index = content["worker"]
        if index >= len(self._noise):
            return [], ("malformed", f"no worker {index}")
        match message.kind:
            case "log":
                kept = self._noise[index].filter(content["lines"])  # the cell markers stay, for a session's cells
                lines = tuple(self._without_markers(index, kept))
                return [WorkerOutput(index, "".join(kept)), ev.Logged(index, lines, self._noise[index].dropped)], None
            case "metrics":
                return [ev.Metrics(index, content)], None
            case "status":
                return [ev.StatusReported(index, content["state"], content.get("detail") or "")], None
            case "hello":
                return [ev.Hello(index, content["pid"], node_label(index) or content.get("host") or "")], None
            case "cell":
                return [_cell_event(index, content)], None
            case "display":
                return [Displayed(index, content["cell"], content["source"], content["data"],
                                  content.get("metadata") or {})], None
        return [], None

    def _without_markers(self, index: int, chunks: list[str]) -> list[str]:
        """The run's views leave out a session's cell markers too (whole lines only, as the noise filter does)."""
        kept = []
        for chunk in chunks:
            out, start = [], 0
            while start < len(chunk):
                end = chunk.find("\n", start)
                end = len(chunk) if end == -1 else end + 1
                piece = chunk[start:end]
                if not (self._line_start[index] and piece.endswith("\n") and is_own_line(piece, (CELL_MARKER,))):
                    out.append(piece)
                self._line_start[index] = piece.endswith("\n")
                start = end
            if out:
                kept.append("".join(out))
        return kept


def _cell_event(index: int, content: dict[str, Any]) -> Relayed:
    """A worker's ``cell`` message (``protocol/session_wire.py`` checked its fields)."""
    cell = content.get("cell", 0)
    match content["event"]:
        case "start":
            return CellStarted(index, cell)
        case "paused":
            return CellPaused(index, cell, content["step"])
        case "pausing":
            return CellPausing(index, cell)
        case "saved":
            saved = content.get("saved", [])
            return CellSaved(index, tuple((e["name"], e["kind"], e["detail"]) for e in saved),
                             tuple((e["name"], e["why"]) for e in content.get("skipped", [])),
                             content.get("dir") or "", content.get("error") or "",
                             tuple((e["name"], e["cell"]) for e in saved if isinstance(e.get("cell"), int)))
    return CellEnded(index, cell, CellEnd(content["status"]), content.get("error") or "",
                     content.get("traceback") or "", bool(content.get("aborted")), content.get("t"),
                     content.get("step"))
