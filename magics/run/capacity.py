"""An elastic run's looks at its cluster (``--min-workers``): how many workers the backend could place now.

The rules are the supervisor core's (magics/run/core/elastic.py); this shell part decides only *when* to ask
the backend (``RayBackend.capacity``: one look is a couple of calls to Ray's control store): once before the
first launch, before each relaunch (the size it gets), every ``elastic_check_interval`` seconds while the group
is smaller than ``-n`` (growing back), and when the user asks (``%workers resize NAME``, from the kernel's
thread: the supervisor thread hands the look to the core and answers).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.core.elastic import Elastic
from nbworkers.magics.run.core.supervisor import Supervisor
from nbworkers.magics.shapes import Backend


def elastic_start(spec: LaunchSpec, backend: Backend) -> tuple[Elastic | None, int]:
    """An elastic run's bounds and the workers its cluster can place now ((None, 0): a fixed size)."""
    if not spec.min_workers:
        return None, 0
    elastic = Elastic(spec.workers, spec.min_workers)
    capacity = backend.capacity()
    if not elastic.fits(capacity):
        raise LaunchError(
            f"--min-workers {elastic.min}: the cluster has room for {capacity} worker(s) now. Add nodes or free"
            " CPUs (`ray status`), lower --cpus-per-worker or --min-workers. Nothing was started.")
    return elastic, capacity


class CapacityLooks:
    """When an elastic run looks at its cluster's capacity, and the user's asks waiting for an answer."""

    def __init__(self, backend: Backend, interval: float, clock=time.monotonic):
        self.backend = backend
        self.interval = interval
        self.clock = clock
        self.last = clock()
        self.asked: int | None = None  # %workers resize: the capacity the user's look saw
        self.answered = threading.Event()

    def ask(self, timeout: float) -> bool:
        """The user's look (any thread): True once the supervisor thread handed it to the core."""
        self.answered.clear()
        self.asked = self.backend.capacity()
        return self.answered.wait(timeout)

    def look(self, core: Supervisor, handle: Callable[[ev.Event], None], lock: Any) -> None:
        """On the supervisor thread, once per round: a look when one is due, handed to the core (``handle`` with
        ``lock`` held); the backend is asked outside the lock."""
        elastic, asked = core.elastic, self.asked
        if elastic is None:
            return
        periodic = len(core.state.workers) < elastic.max and self.clock() - self.last >= self.interval
        if asked is None and not periodic and not core.relaunch_due:
            return
        self.last, self.asked = self.clock(), None
        if asked is None:
            try:
                capacity = self.backend.capacity()
            except Exception as error:  # looked at again at the next interval
                with lock:
                    handle(ev.CapacityUnknown(f"{type(error).__name__}: {error}"))
                return
        with lock:
            handle(ev.CapacitySeen(asked if asked is not None else capacity, asked=asked is not None))
        if asked is not None:
            self.answered.set()
