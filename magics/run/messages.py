"""What a relay message from a worker means to the supervisor core: its events (magics/run/core/events.py).

A message of an earlier launch generation is stale and one naming a worker the run does not have is
malformed: both are dropped and counted by the shell (the relay's ``DropCounts``). Log lines go through the
worker's noise filter first (nbworkers' bookkeeping lines, TensorFlow's C++ start-up chatter: magics/run/noise.py).
"""

from __future__ import annotations

from collections.abc import Callable

from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.noise import OWN_LINES, NoiseFilter
from nbworkers.magics.run.relay import Message


def message_events(message: Message, generation: int, noise: list[NoiseFilter],
                   node_label: Callable[[int], str]) -> tuple[list[ev.Event], tuple[str, str] | None]:
    """(the events, None), or ([], (drop reason, detail)). ``node_label(index)``: the worker's machine as its
    backend knows it ("" when the worker's own host name will do)."""
    content = message.content
    if content["gen"] != generation:
        return [], ("stale", f"generation {content['gen']}")
    index = content["worker"]
    if index >= len(noise):
        return [], ("malformed", f"no worker {index}")
    if message.kind == "log":
        lines = noise[index].filter(content["lines"], OWN_LINES)  # a session's cell markers too
        return [ev.Logged(index, tuple(lines), noise[index].dropped)], None
    if message.kind == "metrics":
        return [ev.Metrics(index, content)], None
    if message.kind == "status":
        return [ev.StatusReported(index, content["state"], content.get("detail") or "")], None
    if message.kind == "hello":
        return [ev.Hello(index, content["pid"], node_label(index) or content.get("host") or "")], None
    return [], None
