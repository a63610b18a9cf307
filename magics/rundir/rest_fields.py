"""What the REST API adds to a run's state for people and tools: ISO 8601 times and a short ``error``.

The state files keep Unix times (floats, what the kernel and ``%workers attach`` compute with); every response
also carries each of them as ISO 8601 UTC text beside it (``started`` -> ``started_iso``). ``error`` is one
short line (the worker's traceback is in its log: ``GET .../logs/<worker>``); a longer text is cut.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

TIME_KEYS = ("started", "ended", "time", "resumed_at")
ERROR_MAX_CHARS = 300


def iso_time(seconds: float) -> str:
    """``2026-11-23T09:30:00.123Z``."""
    moment = _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def short_error(error: Any) -> Any:
    if not isinstance(error, str) or not error:
        return error
    first = error.strip().splitlines()[0] if error.strip() else ""
    more = first != error.strip()
    if len(first) > ERROR_MAX_CHARS:
        first, more = first[:ERROR_MAX_CHARS].rstrip(), True
    return first + (" ... (the worker's log has the rest)" if more else "")


def shape(data: Any) -> Any:
    """A response body with ISO times beside the Unix ones and short errors (new dicts; the input is kept)."""
    if isinstance(data, list):
        return [shape(item) for item in data]
    if not isinstance(data, dict):
        return data
    out = {}
    for key, value in data.items():
        out[key] = shape(value)
        if key in TIME_KEYS and isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                out[f"{key}_iso"] = iso_time(float(value))
            except (OverflowError, OSError, ValueError):
                pass
        elif key == "error":
            out[key] = short_error(value)
    return out
