"""TensorFlow's framework: ``TF_CONFIG``, composed here alone, exactly as TensorFlow's cluster resolvers read it.

The training cluster holds the chief, worker and ps tasks; an evaluator is outside it (its TF_CONFIG has task type
``evaluator`` and the training cluster without an ``evaluator`` entry, as Estimator's ``train_and_evaluate``
expects). Which tasks a cell's flags give and what each role runs: ``magics/launch/tfconfig.py``, ``roles.py``.
Registered as ``tf`` in the entry-point group ``nbworkers.frameworks`` (pyproject.toml).

This module never imports TensorFlow: it runs in the kernel.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbworkers.magics.plugins import Flag
from nbworkers.magics.shapes import PlannedTask

ENV_TF_CONFIG = "TF_CONFIG"
TRAINING_CLUSTER_ROLES = ("chief", "worker", "ps")  # the jobs in every task's TF_CONFIG cluster


def cluster_spec(tasks: Sequence[PlannedTask], host: str | Sequence[str],
                 ports: Sequence[int]) -> dict[str, list[str]]:
    """The training cluster: chief, worker and ps addresses (never the evaluator, which is outside it).
    ``host``: one for every task, or each task's own (tasks on several machines, e.g. the Ray backend)."""
    hosts = [host] * len(tasks) if isinstance(host, str) else host
    spec: dict[str, list[str]] = {}
    for task, task_host, port in zip(tasks, hosts, ports):
        if task.role in TRAINING_CLUSTER_ROLES:
            spec.setdefault(task.role, []).append(f"{task_host}:{port}")
    return spec


def tf_configs(tasks: Sequence[PlannedTask], host: str | Sequence[str], ports: Sequence[int]) -> list[str]:
    """The TF_CONFIG value (JSON text) of each task, in the order of ``tasks``."""
    spec = cluster_spec(tasks, host, ports)
    return [json.dumps({"cluster": spec, "task": {"type": t.role, "index": t.index}}) for t in tasks]


@dataclass(frozen=True)
class TensorFlow:
    """The ``Framework`` (``frameworks/__init__.py``) of TensorFlow's multi-worker strategies."""

    name: str = "tf"
    summary: str = "TensorFlow's multi-worker strategies (TF_CONFIG; the default)"
    flags: Sequence[Flag] = ()
    roles: frozenset[str] = frozenset({"chief", "worker", "ps", "evaluator"})
    variables: frozenset[str] = frozenset({ENV_TF_CONFIG})
    shown: str = ENV_TF_CONFIG
    requires: Sequence[str] = ()  # (TensorFlow is imported by the cell, when it uses it)
    chatter: Sequence[str] = ()  # TensorFlow's own: glog/absl lines by level (magics/run/noise.py)

    def shared(self, options: Mapping[str, Any]) -> dict[str, str]:
        return {}

    def environment(self, tasks: Sequence[PlannedTask], hosts: Sequence[str], ports: Sequence[int],
                    index: int) -> dict[str, str]:
        task = tasks[index]
        config = {"cluster": cluster_spec(tasks, hosts, ports), "task": {"type": task.role, "index": task.index}}
        return {ENV_TF_CONFIG: json.dumps(config)}


TF = TensorFlow()
