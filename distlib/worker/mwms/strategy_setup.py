"""What a worker does around MultiWorkerMirroredStrategy's multi-worker setup (installed once, by ``startup`` or
``strategy()``; the wrapper itself, which touches the strategy's private state, is ``compat/mwms_patch.py``):

- reports "waiting" while the strategy connects to the other workers and "running" after;
- when ``collective_startup`` already started collectives for this same cluster, has the strategy skip starting
  the server a second time (which upstream would do with a "may cause error when accessing previously created
  tensors" warning) and leave peer-failure detection to the coordination service, as upstream does;
- checks that every worker sees the same number of GPUs and the same cluster (``worker_facts``), so unequal
  GPU counts give a clear ``GpuCountMismatchError`` before training instead of a hang.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from nbworkers.distlib import collectives
from nbworkers.distlib.cluster import TRAINING_JOBS, TaskInfo
from nbworkers.distlib.compat import eager_context, mwms_patch
from nbworkers.distlib.worker import stop_signal
from nbworkers.distlib.worker.mwms import collective_startup, leader_wait, worker_facts
from nbworkers.distlib.worker.status import send_status
from nbworkers.protocol.statuses import WorkerStatus


def _task_of(resolver: Any) -> TaskInfo | None:
    """This task as the strategy's cluster resolver sees it (a strategy may be given a resolver of its own)."""
    try:
        spec = resolver.cluster_spec().as_dict()
        cluster = {job: list(v) if isinstance(v, (list, tuple)) else [v[k] for k in sorted(v)]
                   for job, v in spec.items()}
        num_workers = sum(len(cluster.get(job, [])) for job in TRAINING_JOBS)
        return TaskInfo(resolver.task_type or "worker", int(resolver.task_id or 0), num_workers, False, cluster)
    except Exception:
        return None


def _same_cluster(resolver: Any, info: TaskInfo) -> bool:
    seen = _task_of(resolver)
    return seen is not None and (seen.cluster, seen.type, seen.index) == (info.cluster, info.type, info.index)


def check_devices_agree(extended: Any) -> None:
    """Exchange (device type, devices per worker, cluster fingerprint) with the other workers of this
    strategy (``CollectiveAllReduceExtended``) and raise GpuCountMismatchError on disagreement."""
    if not worker_facts.coordination_service_available():
        return
    shape = mwms_patch.shape_of(extended)
    cluster = json.dumps(shape.cluster, sort_keys=True, default=str)
    local = {
        "devices": shape.devices_per_worker,
        "device_type": shape.device_type,
        "cluster": hashlib.sha256(cluster.encode()).hexdigest()[:16],
    }
    facts = worker_facts.exchange(local, shape.worker_id, shape.num_workers)
    collectives.check_worker_facts(facts)


def before_setup(cluster_resolver: Any, extended: Any) -> None:
    """Right before the strategy connects to the other workers."""
    enabled = collective_startup.enabled_for()
    if enabled is not None and eager_context.started() and _same_cluster(cluster_resolver, enabled):
        mwms_patch.skip_second_server(extended)  # collective_startup started it with this cluster's server def
    counts = collectives.gpu_counts_from_env()  # the launcher's view: checked before anything starts
    if counts is not None:
        collectives.check_equal_gpu_counts(counts, collectives.ENV_GPU_COUNTS)
    if not eager_context.started():  # it will connect to the other workers now
        send_status(WorkerStatus.WAITING, "setting up MultiWorkerMirroredStrategy")
        seen = _task_of(cluster_resolver)
        if seen is not None:
            leader_wait.wait_for_leader(seen)


def after_setup(extended: Any, eagerly: bool) -> None:
    """Right after: SIGTERM back to Python's disposition, the cross-worker device check, "running"."""
    stop_signal.reassert_sigterm()
    if eagerly and mwms_patch.shape_of(extended).num_workers > 1:
        check_devices_agree(extended)
    send_status(WorkerStatus.RUNNING)


def install() -> None:
    """Wrap the strategy's setup with ``before_setup`` / ``after_setup`` (idempotent)."""
    mwms_patch.install(before_setup, after_setup)
