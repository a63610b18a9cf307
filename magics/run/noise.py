"""What the user's log views leave out of a worker's output: one pattern list for the kernel and the server.

Two kinds of lines, kept in the log files on disk and out of the widget's log, a cell's output and the sidebar's
Log panel (the kernel filters relayed output with ``NoiseFilter``; the server extension filters the file it serves
with ``shown_log``):

- **nbworkers' own bookkeeping** (``OWN_LINES``), the lines every healthy run writes: a launch's
  ``--- nbworkers: worker 0, launch 0, TF_CPP_MIN_LOG_LEVEL=2, TF_CONFIG=...``, a forked worker's
  ``--- nbworkers: forked from zygote ...``, the end of a worker's cell (``wire.CELL_END_LINE``: the log file has
  it, its host relays it not), TensorFlow's preemption watcher ended by its peer's leaving
  (``wire.WATCHER_STOPPED_LINE``), a session's cell markers ``--- nbworkers: cell N start ---`` (a session routes each
  cell's lines by them, then drops them: ``magics/sessions/cell.py``). Lines that say
  something went wrong or why a worker ended (``stopped (...)``, ``node lost``, ``restarting the group``, a zygote
  that could not fork) stay in every view.
- **TensorFlow's C++ start-up chatter**, below the worker's ``TF_CPP_MIN_LOG_LEVEL`` (default 2 in the workers:
  magics/launch/environment.py). TensorFlow 2.21 logs through absl, and the lines it writes before
  ``absl::InitializeLog()`` (the oneDNN notice, "Could not find cuda drivers", absl's own "All log messages before
  absl::InitializeLog() ..." warning) ignore ``TF_CPP_MIN_LOG_LEVEL``. So ``I...`` lines go at 1 and up, ``W...``
  at 2 and up, ``E...`` at 3, plus absl's warning and, at 2 and up, the "failed call to cuInit" error every
  CPU-only machine prints. A user who sets the level lower (kernel environment or ``--env``) sees them all. The
  launch line records the level, so the server extension filters a log file as the kernel filtered its lines.
  A hidden C++ line takes the rest of its message along (``CPP_CONTINUATIONS``: the gRPC detail under "Aborting
  RingReduce with UNAVAILABLE: Socket closed" after a Stop), and a C++ line written into a progress bar's open
  line ends that line first (stderr beside stdout), as a terminal shows it.
"""

from __future__ import annotations

import re

from nbworkers.magics.collective_abort import is_collective_abort
from nbworkers.magics.frameworks import registry as frameworks
from nbworkers.magics.launch.environment import DEFAULT_ENV
from nbworkers.protocol import session_wire, wire
from nbworkers.protocol.terminal import TerminalStream, settled_lines

# glog/absl format: severity letter, MMDD, time, thread id, file:line]
CPP_LOG_LINE = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.\-/]+:\d+\] ")
# the same written into an open line (TensorFlow logs to stderr while a progress bar's line on stdout has no newline)
CPP_LOG_GLUED = re.compile(CPP_LOG_LINE.pattern[1:])
# the rest of a multi-line C++ log message (a Status with its gRPC payload: after a Stop or a peer's end, the lines
# under "Aborting RingReduce with UNAVAILABLE: Socket closed"), hidden with the line they belong to
CPP_CONTINUATIONS = re.compile(r"^(Additional GRPC error information from |:UNKNOWN:|:\{\"created\"|"
                               r"The error could be from a previous operation\. |\t \[\[\{\{)")
ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
NO_GPU_ERRORS = ("failed call to cuInit",)  # printed at E level on every machine without a GPU driver
SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}
LEVEL_NAME = "TF_CPP_MIN_LOG_LEVEL"
# nbworkers' own bookkeeping lines (see the docstring); the writers: magics/run/group_launch.py (launch),
# distlib/worker/zygote.py (forked), protocol/session_wire.py (cell markers: session_wire.MARKER)
# (the launch line ends with the variable its framework shows: TF_CONFIG=..., KERAS_DISTRIBUTION_JOB_ADDRESSES=...)
LAUNCH_LINE = re.compile(rf"^--- nbworkers: \w+ \d+, launch \d+, (?:{LEVEL_NAME}=(?P<level>[^,]*), )?[A-Z][A-Z0-9_]*=")
FORKED_LINE = re.compile(r"^--- nbworkers: forked from zygote \d+ ")
CELL_MARKER = session_wire.MARKER
CELL_END_LINE = re.compile(re.escape(wire.CELL_END_LINE))  # the worker's word to its host (which relays it not)
WATCHER_LINE = re.compile(re.escape(wire.WATCHER_STOPPED_LINE))  # TensorFlow's preemption watcher after its peer left
OWN_LINES = (LAUNCH_LINE, FORKED_LINE, CELL_MARKER, CELL_END_LINE, WATCHER_LINE)
UNROUTED_OWN_LINES = (LAUNCH_LINE, FORKED_LINE, CELL_END_LINE, WATCHER_LINE)  # dropped before routing by the markers


def launch_line(role: str, index: int, generation: int, level: str, value: str, shown: str = "TF_CONFIG") -> str:
    """The line a launch writes at the head of each worker's log (``LAUNCH_LINE`` reads it back): ``shown``, the
    variable the run's framework shows (``Framework.shown``), and its ``value``."""
    return f"--- nbworkers: {role} {index}, launch {generation}, {LEVEL_NAME}={level}, {shown}={value}\n"


def noise_level(value: str | None) -> int:
    """TF_CPP_MIN_LOG_LEVEL as a number (0 when unset or not a number, as TensorFlow reads it)."""
    try:
        return int(value or 0)
    except ValueError:
        return 0


DEFAULT_LEVEL = noise_level(DEFAULT_ENV[LEVEL_NAME])  # the workers' level unless the user sets one


def is_own_line(line: str, patterns: tuple[re.Pattern[str], ...] = OWN_LINES) -> bool:
    """One of nbworkers' bookkeeping lines (``patterns``: which)."""
    if not line.startswith("--- nbworkers: "):
        return False
    whole = line.rstrip("\r\n") + "\n"
    return any(pattern.match(whole) for pattern in patterns)


def is_chatter(line: str, level: int) -> bool:
    """TensorFlow's C++ start-up chatter below ``level`` (the worker's TF_CPP_MIN_LOG_LEVEL), and a framework's own
    start-up lines (``Framework.chatter``: gloo's for JAX) at 1 and up."""
    if level <= 0:
        return False
    if line.startswith(ABSL_PREAMBLE):
        return True
    framework_lines = frameworks.chatter()
    if framework_lines is not None and framework_lines.match(line):
        return True
    match = CPP_LOG_LINE.match(line)
    if not match:
        return False
    if is_collective_abort(line[match.end():]):  # after one worker's error: the cell's own message says it
        return True
    severity = SEVERITY[match.group(1)]
    if severity < level:
        return True
    return level >= 2 and severity == 2 and any(text in line for text in NO_GPU_ERRORS)


def is_noise(line: str, level: int) -> bool:
    """A line the user's views leave out: nbworkers' bookkeeping or TensorFlow's chatter below ``level``."""
    return is_own_line(line) or is_chatter(line, level)


def unglued(text: str) -> str:
    """``text`` with a newline before each C++ log line written into a progress bar's open line (a line redrawn
    with ``\\r``): on a terminal the bar ends there. Other text before a C++ line keeps it (not chatter)."""
    if "\r" not in text:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        redrawn = line.find("\r")
        glued = CPP_LOG_GLUED.search(line, redrawn + 1) if redrawn != -1 else None
        if glued is not None:
            lines[i] = line[:glued.start()] + "\n" + line[glued.start():]
    return "\n".join(lines)


def shown_log(text: str, tail: int | None = None) -> str:
    """A worker's log file as the user's views show it (the sidebar's Log panel): the noise left out at the level
    its launch line records (``DEFAULT_LEVEL`` before one is seen, as when the file's start was cut), with the
    rest of a hidden C++ message (``CPP_CONTINUATIONS``); then its last ``tail`` lines. Escape codes stripped, a
    progress bar's updates collapsed (``protocol/terminal.py``)."""
    level = DEFAULT_LEVEL
    kept: list[str] = []
    hidden = False  # the line before was a C++ line left out: its message's further lines go too
    for line in settled_lines(unglued(text)):
        launch = LAUNCH_LINE.match(line)
        if launch and launch.group("level") is not None:
            level = noise_level(launch.group("level"))
        chatter = is_chatter(line, level) or (hidden and bool(CPP_CONTINUATIONS.match(line)))
        if not chatter and not is_own_line(line):
            kept.append(line)
        hidden = chatter
    if tail is not None:
        kept = kept[-tail:] if tail > 0 else []
    return "\n".join(kept)


class NoiseFilter:
    """Drops noise lines from one worker's relayed chunks (pieces of output that need not end on a line).

    ``dropped`` counts TensorFlow's chatter (the widget says how many such lines it hid), ``own_dropped``
    nbworkers' own lines. ``filter(chunks, own_lines)``: which of nbworkers' lines go, by default all but the cell
    markers (``UNROUTED_OWN_LINES``: a session routes its cells' output by them); the run's views pass
    ``OWN_LINES`` (``messages.py``). Escape codes and control characters go first (``protocol/terminal.py``:
    ``TerminalStream``); carriage returns stay for the log tail to collapse."""

    def __init__(self, level: int):
        self.level = level
        self.dropped = 0
        self.own_dropped = 0
        self._at_line_start = True
        self._hidden = False  # the last line was a C++ line dropped: its message's further lines go too
        self._redrawn = False  # the open line was redrawn (``\\r``: a progress bar): a C++ line written into it ends it
        self._terminal = TerminalStream()

    def filter(self, chunks: list[str], own_lines: tuple[re.Pattern[str], ...] = UNROUTED_OWN_LINES) -> list[str]:
        kept: list[str] = []
        for chunk in map(self._terminal.feed, chunks):
            out = []
            start = 0
            while start < len(chunk):
                end = chunk.find("\n", start)
                end = len(chunk) if end == -1 else end + 1
                piece = chunk[start:end]
                glued = self._glued(piece)
                if glued is not None:  # a C++ line written into a progress bar's open line: the bar ends there
                    out.append(piece[:glued] + "\n")
                    piece, self._at_line_start, self._redrawn = piece[glued:], True, False
                self._redrawn = not piece.endswith("\n") and (self._redrawn or "\r" in piece)
                whole = self._at_line_start and piece.endswith("\n")
                if whole and is_own_line(piece, own_lines):
                    self.own_dropped += 1
                elif whole and (is_chatter(piece, self.level)
                                or self._hidden and CPP_CONTINUATIONS.match(piece) and self.level > 0):
                    self.dropped += 1
                    self._hidden = True
                else:
                    out.append(piece)
                    self._hidden = False
                self._at_line_start = piece.endswith("\n")
                start = end
            if out:
                kept.append("".join(out))
        return kept

    def _glued(self, piece: str) -> int | None:
        """Where a C++ log line starts inside ``piece`` after a redrawn line's text (None: nowhere)."""
        if not self._redrawn and "\r" not in piece:
            return None
        glued = CPP_LOG_GLUED.search(piece, 1 if self._at_line_start else 0)
        if glued is None or not (self._redrawn or "\r" in piece[:glued.start()]):
            return None
        return glued.start() if glued.start() or not self._at_line_start else None
