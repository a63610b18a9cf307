"""TensorFlow's C++ start-up chatter, kept out of what the notebook shows (the log file on disk keeps it).

TensorFlow 2.21 logs through absl, and the lines it writes before ``absl::InitializeLog()`` (the oneDNN notice,
"Could not find cuda drivers", absl's own "All log messages before absl::InitializeLog() ..." warning) ignore
``TF_CPP_MIN_LOG_LEVEL``. So the kernel drops, from each worker's relayed output, the C++ log lines below the
worker's ``TF_CPP_MIN_LOG_LEVEL`` (default 2 in the workers: magics/launch/environment.py) — ``I...`` lines at 1 and up,
``W...`` at 2 and up, ``E...`` at 3 — plus absl's warning and, at 2 and up, the "failed call to cuInit" error
every CPU-only machine prints. A user who sets the level lower (kernel environment or ``--env``) sees them all.
"""

from __future__ import annotations

import re

from nbworkers.magics.collective_abort import is_collective_abort

# glog/absl format: severity letter, MMDD, time, thread id, file:line]
CPP_LOG_LINE = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.\-/]+:\d+\] ")
ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
NO_GPU_ERRORS = ("failed call to cuInit",)  # printed at E level on every machine without a GPU driver
SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}


def noise_level(value: str | None) -> int:
    """TF_CPP_MIN_LOG_LEVEL as a number (0 when unset or not a number, as TensorFlow reads it)."""
    try:
        return int(value or 0)
    except ValueError:
        return 0


def is_noise(line: str, level: int) -> bool:
    if level <= 0:
        return False
    if line.startswith(ABSL_PREAMBLE):
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


class NoiseFilter:
    """Drops noise lines from one worker's relayed chunks (pieces of output that need not end on a line)."""

    def __init__(self, level: int):
        self.level = level
        self.dropped = 0
        self._at_line_start = True

    def filter(self, chunks: list[str]) -> list[str]:
        if self.level <= 0:
            return chunks
        kept: list[str] = []
        for chunk in chunks:
            out = []
            start = 0
            while start < len(chunk):
                end = chunk.find("\n", start)
                end = len(chunk) if end == -1 else end + 1
                piece = chunk[start:end]
                whole = self._at_line_start and piece.endswith("\n")
                if whole and is_noise(piece, self.level):
                    self.dropped += 1
                else:
                    out.append(piece)
                self._at_line_start = piece.endswith("\n")
                start = end
            if out:
                kept.append("".join(out))
        return kept
