"""How many workers a Ray cluster could place now: an elastic run's size (magics/run/core/elastic.py).

Pure, from what Ray's public calls say (``ray.nodes()``, ``ray.available_resources()``), so that it is
unit-tested without Ray: the free CPUs (and GPUs) of the live nodes, plus what the run's own placement group
holds on them (they are the run's to reuse), in bundles of ``cpus`` (and ``gpus``) per worker; with
``spread`` (STRICT_SPREAD), at most one worker per live node big enough for a bundle. An estimate: another
driver may take resources meanwhile, and the free resources are the cluster's sum, not per node.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

EPSILON = 1e-9  # 0.1 + 0.2 CPUs free is room for a 0.3-CPU worker


def placeable(nodes: Iterable[dict[str, Any]], free: dict[str, float], held_nodes: Iterable[str], cpus: float,
              gpus: int = 0, spread: bool = False) -> int:
    """Workers of ``cpus`` CPUs (and ``gpus`` GPUs) each the cluster could place now. ``nodes``: ``ray.nodes()``;
    ``free``: ``ray.available_resources()``; ``held_nodes``: the node id of each bundle the run holds."""
    alive = {node["NodeID"]: node for node in nodes if node.get("Alive")}
    held = sum(1 for node_id in held_nodes if node_id in alive)
    count = int((free.get("CPU", 0.0) + cpus * held) / cpus + EPSILON)
    if gpus:
        count = min(count, int((free.get("GPU", 0.0) + gpus * held) / gpus + EPSILON))
    if spread:
        big = [node for node in alive.values() if _fits(node.get("Resources") or {}, cpus, gpus)]
        count = min(count, len(big))
    return max(count, 0)


def _fits(resources: dict[str, float], cpus: float, gpus: int) -> bool:
    return resources.get("CPU", 0.0) + EPSILON >= cpus and (not gpus or resources.get("GPU", 0.0) >= gpus)
