"""TensorFlow's C++ log lines about collectives aborted after one worker's error, kept out of the notebook cell.

When one worker of a group fails, nbworkers aborts the others' pending collectives (``distlib/worker/session.py``,
``abort``); TensorFlow then logs, at E level on every worker that waited, lines such as

    E0000 00:00:1795811468.219249   14146 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort
    UNAVAILABLE: worker 1 of session 'train' failed in cell 6
    E0000 00:00:1795811468.219351   14146 ring_alg.cc:291] Aborting RingReduce with UNAVAILABLE: Collective ops is
    aborted by: worker 1 of session 'train' failed in cell 6

They say nothing the cell's own message does not ("worker 1: ValueError ... (worker 0 was interrupted because of
it)"), so the kernel's noise filter (``magics/run/noise.py``, ``is_noise``: the one place a worker's relayed output
is filtered before it reaches a cell, for ``%%worker`` runs and sessions alike) drops a C++ log line whose message
matches one of ``ABORT_PATTERNS``, like the rest of TensorFlow's chatter, unless the user set
``TF_CPP_MIN_LOG_LEVEL=0``. The worker's log file keeps them.
"""

from __future__ import annotations

import re

# searched in a C++ log line's message (after "file.cc:123] "); one per line TensorFlow logs when collectives abort
ABORT_PATTERNS: tuple[re.Pattern[str], ...] = tuple(re.compile(pattern) for pattern in (
    r"^BaseCollectiveExecutor::StartAbort ",  # base_collective_executor.cc: the abort, with its reason
    r"^Aborting (RingReduce|RingGather|Broadcast|AllToAll|Permute)\b",  # ring_alg.cc, the broadcaster, ...
    r"Collective ops is aborted by: ",  # any other op that ends because of the abort
))


def is_collective_abort(message: str) -> bool:
    """``message`` (a C++ log line without its ``E0000 ... file.cc:123]`` prefix) says collectives were aborted."""
    return any(pattern.search(message) for pattern in ABORT_PATTERNS)
