"""Cluster facts from ``TF_CONFIG``, read without importing TensorFlow.

``task()`` says which task this process is, how many workers train together and whether it is the chief
(the ``chief`` task, or index 0 of ``worker`` when there is no ``chief`` job, as in TensorFlow's
``multi_worker_util.is_chief``). A malformed ``TF_CONFIG`` raises ``TFConfigError`` naming what is wrong.

Roles: ``chief`` and ``worker`` train; ``ps`` tasks hold variables for ParameterServerStrategy, whose
coordinator is the chief; the ``evaluator`` (at most one) is outside the training cluster: its task type is
``evaluator`` and its cluster usually has no ``evaluator`` entry (Estimator's ``train_and_evaluate`` layout;
an entry with one address is accepted too, as TensorFlow's ``multi_worker_util`` does). It is never the chief.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

ENV_TF_CONFIG = "TF_CONFIG"
TRAINING_JOBS = ("chief", "worker")  # the jobs that hold replicas under MultiWorkerMirroredStrategy
KNOWN_JOBS = ("chief", "worker", "evaluator", "ps")


class TFConfigError(ValueError):
    """TF_CONFIG is malformed or inconsistent; the message says what to fix."""


@dataclass(frozen=True)
class TaskInfo:
    type: str  # job name of this process: "worker", "chief", ... ("worker" when there is no TF_CONFIG)
    index: int  # index of this process within its job
    num_workers: int  # processes that train together (chief + workers); 1 without TF_CONFIG
    is_chief: bool  # writes the real checkpoints / saved models
    cluster: dict[str, list[str]] = field(default_factory=dict)  # job -> addresses; {} without TF_CONFIG

    @property
    def in_cluster(self) -> bool:
        """True when TF_CONFIG describes a cluster (so MultiWorkerMirroredStrategy is used)."""
        return bool(self.cluster)

    @property
    def is_evaluator(self) -> bool:
        return self.type == "evaluator"

    @property
    def uses_parameter_servers(self) -> bool:
        """The cluster has ``ps`` tasks: ParameterServerStrategy (or Estimator's parameter-server training)."""
        return "ps" in self.cluster

    @property
    def is_coordinator(self) -> bool:
        """The task that runs the training program under ParameterServerStrategy (the chief)."""
        return self.uses_parameter_servers and self.type == "chief"

    @property
    def worker_id(self) -> int:
        """This process's position among the training tasks (chief first), 0..num_workers-1."""
        if self.type == "chief" or not self.cluster:
            return 0
        return (1 if "chief" in self.cluster else 0) + self.index if self.type == "worker" else self.index


def _check_address(job: str, position: int, address: object) -> None:
    where = f"TF_CONFIG cluster[{job!r}][{position}]"
    if not isinstance(address, str) or ":" not in address:
        raise TFConfigError(f"{where} = {address!r} is not a 'host:port' string.")
    host, _, port = address.rpartition(":")
    if not host:
        raise TFConfigError(f"{where} = {address!r} has no host.")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise TFConfigError(f"{where} = {address!r}: the port must be a number from 1 to 65535.")


def parse_tf_config(text: str) -> TaskInfo:
    """Validate a TF_CONFIG string and describe this task. Raises TFConfigError naming the problem."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise TFConfigError(f"TF_CONFIG is not valid JSON ({error.msg} at character {error.pos}): {text[:200]!r}")
    if not isinstance(config, dict):
        raise TFConfigError(f"TF_CONFIG must be a JSON object with 'cluster' and 'task', got {type(config).__name__}.")
    cluster = config.get("cluster")
    task = config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise TFConfigError("TF_CONFIG has no 'cluster' object (e.g. {\"worker\": [\"host1:port\", \"host2:port\"]}).")
    if not isinstance(task, dict):
        raise TFConfigError("TF_CONFIG has no 'task' object (e.g. {\"type\": \"worker\", \"index\": 0}).")
    seen: dict[str, str] = {}
    for job, addresses in cluster.items():
        if job not in KNOWN_JOBS:
            raise TFConfigError(f"TF_CONFIG cluster has unknown job {job!r}; jobs are {', '.join(KNOWN_JOBS)}.")
        if not isinstance(addresses, list) or not addresses:
            raise TFConfigError(f"TF_CONFIG cluster[{job!r}] must be a non-empty list of 'host:port' strings.")
        for position, address in enumerate(addresses):
            _check_address(job, position, address)
            if address in seen:
                raise TFConfigError(
                    f"TF_CONFIG gives address {address} to both {seen[address]} and {job}[{position}]:"
                    " every task needs its own port."
                )
            seen[address] = f"{job}[{position}]"
    if len(cluster.get("chief", [])) > 1:
        raise TFConfigError("TF_CONFIG cluster has more than one 'chief'; there can be at most one.")
    if len(cluster.get("evaluator", [])) > 1:
        raise TFConfigError("TF_CONFIG cluster has more than one 'evaluator'; there can be at most one.")
    if not any(job in cluster for job in TRAINING_JOBS):
        raise TFConfigError("TF_CONFIG cluster has neither a 'worker' nor a 'chief' job.")
    task_type = task.get("type")
    task_index = task.get("index", 0)
    if task_type == "evaluator" and task_type not in cluster:  # outside the training cluster, as Estimator expects
        if task_index not in (0, "0"):
            raise TFConfigError(
                f"TF_CONFIG task index {task_index!r} of the evaluator must be 0: there is at most one.")
        return TaskInfo("evaluator", 0, sum(len(cluster.get(job, [])) for job in TRAINING_JOBS), False,
                        {k: list(v) for k, v in cluster.items()})
    if task_type not in cluster:
        raise TFConfigError(
            f"TF_CONFIG task type {task_type!r} is not a job of the cluster ({', '.join(sorted(cluster))})."
        )
    if isinstance(task_index, str) and task_index.isdigit():
        task_index = int(task_index)
    if not isinstance(task_index, int) or isinstance(task_index, bool):
        raise TFConfigError(f"TF_CONFIG task index {task_index!r} is not an integer.")
    if not 0 <= task_index < len(cluster[task_type]):
        raise TFConfigError(
            f"TF_CONFIG task index {task_index} is out of range: job {task_type!r} has"
            f" {len(cluster[task_type])} task(s), so the index must be 0..{len(cluster[task_type]) - 1}."
        )
    num_workers = sum(len(cluster.get(job, [])) for job in TRAINING_JOBS)
    if "chief" in cluster:
        is_chief = task_type == "chief"
    else:
        is_chief = task_type == "worker" and task_index == 0
    return TaskInfo(str(task_type), task_index, num_workers, is_chief, {k: list(v) for k, v in cluster.items()})


LOCAL_TASK = TaskInfo("worker", 0, 1, True, {})


def task(environ: dict[str, str] | None = None) -> TaskInfo:
    """This process's task: from TF_CONFIG, or a single local worker (the chief) when TF_CONFIG is unset."""
    env = os.environ if environ is None else environ
    text = env.get(ENV_TF_CONFIG, "").strip()
    if not text:
        return LOCAL_TASK
    return parse_tf_config(text)


def is_chief(environ: dict[str, str] | None = None) -> bool:
    """True on the task that writes the real checkpoints and saved models."""
    return task(environ).is_chief
