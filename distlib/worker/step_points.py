"""Where a running cell may be stopped at a step every worker agrees on: a session registers its ``step_point``
(``worker/session.py``: the kernel's pause, then the step every worker raises at), and a framework's training loop
that TensorFlow's step calls do not see (Keras' fit on JAX: ``distlib/frameworks/jax_stop.py``) calls ``reached()``
at each step's end."""

from __future__ import annotations

from collections.abc import Callable

_points: list[Callable[[], None]] = []


def register(point: Callable[[], None]) -> None:
    """Call ``point`` at each step's end of such a loop (it may raise ``KeyboardInterrupt``: the agreed stop)."""
    _points.append(point)


def reached() -> None:
    """A step ended (in the main thread)."""
    for point in list(_points):
        point()
