"""Elastic worker groups (``-n 4 --min-workers 2``): how many workers a launch of the group gets.

Pure rules, no Ray here: the shell asks its backend how many workers the cluster could place now, counting
the run's own (``RayBackend.capacity``), and hands that in as an event (``CapacitySeen``); the supervisor core
(``supervisor.py``) applies these rules at each launch of the group and between launches:

- a launch gets ``min(max, capacity)`` workers; fewer than ``min`` fails the run (``TooFewWorkers``) — a
  shrink is a group restart with a new ``TF_CONFIG``, from the last checkpoint, never a worker dropped from a
  running group (TensorFlow's collectives have a fixed size; its elastic RFC never landed);
- after a node loss the restart goes on with the workers left, while at least ``min`` can be placed;
- while smaller than ``max``, capacity that returns (a periodic look, ``elastic_check_interval``, or
  ``%workers resize NAME``) restarts the group bigger: not a failure, it uses up no restart.

Each change of size is a restart whose history entry says the sizes before and after (``workers``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Elastic:
    """The bounds of an elastic group: ``-n`` is ``max``, ``--min-workers`` is ``min``."""

    max: int
    min: int

    def __post_init__(self) -> None:
        if not 1 <= self.min <= self.max:
            raise ValueError(f"elastic bounds need 1 <= min <= max, not min {self.min}, max {self.max}")

    def size_for(self, capacity: int) -> int:
        """Workers a launch gets when the cluster can place ``capacity`` (below ``min``: see ``fits``)."""
        return max(0, min(self.max, capacity))

    def fits(self, capacity: int) -> bool:
        return self.size_for(capacity) >= self.min

    def growth(self, current: int, capacity: int) -> int | None:
        """The bigger size to restart at when ``capacity`` has room for more than ``current``, else None."""
        size = self.size_for(capacity)
        return size if size > current else None


def growth(elastic: Elastic | None, current: int, capacity: int, busy: str = "") -> tuple[int | None, str]:
    """Whether a group of ``current`` workers restarts bigger, seeing room for ``capacity``: (the new size or
    None, what to tell the user who asked). ``busy``: the group's status when it cannot restart now."""
    if elastic is None:
        return None, "not elastic: its size is fixed (-n); run the cell with --min-workers M to make it elastic"
    grow = elastic.growth(current, capacity)
    if busy:
        return None, f"not now: the group is {busy}"
    if grow is None:
        return None, (f"no change: it runs {current} of at most {elastic.max} workers and the cluster has room for "
                      f"{capacity}")
    return grow, f"growing from {current} to {grow} workers: the group restarts from its last checkpoint"
