"""``TF_CONFIG`` for every process of a cluster, exactly as TensorFlow's cluster resolvers read it."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    """One process of the cluster: its role (TF_CONFIG task type) and index within that role."""

    role: str
    index: int


def plan_tasks(workers: int) -> list[Task]:
    return [Task("worker", i) for i in range(workers)]


def cluster_spec(tasks: list[Task], host: str, ports: list[int]) -> dict[str, list[str]]:
    spec: dict[str, list[str]] = {}
    for task, port in zip(tasks, ports):
        spec.setdefault(task.role, []).append(f"{host}:{port}")
    return spec


def tf_configs(tasks: list[Task], host: str, ports: list[int]) -> list[str]:
    """The TF_CONFIG value (JSON text) of each task, in the order of ``tasks``."""
    spec = cluster_spec(tasks, host, ports)
    return [json.dumps({"cluster": spec, "task": {"type": t.role, "index": t.index}}) for t in tasks]
