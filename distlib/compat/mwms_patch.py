"""Wrap MultiWorkerMirroredStrategy's multi-worker setup (installed once, by ``startup`` or ``strategy()``).

Around ``CollectiveAllReduceExtended._initialize_multi_worker`` it:
- reports "waiting" while the strategy connects to the other workers and "running" after;
- when ``collective_startup`` already started collectives for this same cluster, skips starting the server a
  second time (which upstream would do with a "may cause error when accessing previously created tensors"
  warning) and leaves peer-failure detection to the coordination service, as upstream does;
- checks that every worker sees the same number of GPUs and the same cluster (``worker_facts``), so unequal
  GPU counts give a clear ``GpuCountMismatchError`` before training instead of a hang.
"""

from __future__ import annotations

import hashlib
import json

from nbworkers.distlib import collectives
from nbworkers.distlib.cluster import TRAINING_JOBS, TaskInfo
from nbworkers.distlib.compat import eager_context, internals
from nbworkers.distlib.compat.import_hooks import wrap_once
from nbworkers.distlib.worker import collective_startup, leader_wait, worker_facts
from nbworkers.distlib.worker.status import send_status


def _task_of(resolver) -> TaskInfo | None:
    """This task as the strategy's cluster resolver sees it (a strategy may be given a resolver of its own)."""
    try:
        spec = resolver.cluster_spec().as_dict()
        cluster = {job: list(v) if isinstance(v, (list, tuple)) else [v[k] for k in sorted(v)]
                   for job, v in spec.items()}
        num_workers = sum(len(cluster.get(job, [])) for job in TRAINING_JOBS)
        return TaskInfo(resolver.task_type or "worker", int(resolver.task_id or 0), num_workers, False, cluster)
    except Exception:
        return None


def _same_cluster(resolver, info: TaskInfo) -> bool:
    seen = _task_of(resolver)
    return seen is not None and (seen.cluster, seen.type, seen.index) == (info.cluster, info.type, info.index)


def check_devices_agree(extended) -> None:
    """Exchange (device type, devices per worker, cluster fingerprint) with the other workers of this
    strategy (``CollectiveAllReduceExtended``) and raise GpuCountMismatchError on disagreement."""
    if not worker_facts.coordination_service_available():
        return
    cluster = json.dumps(extended._cluster_spec.as_dict(), sort_keys=True, default=str)
    local = {
        "devices": int(getattr(extended, "_num_devices_per_worker", 1)),
        "device_type": str(getattr(extended, "_local_device_type", "CPU")),
        "cluster": hashlib.sha256(cluster.encode()).hexdigest()[:16],
    }
    facts = worker_facts.exchange(local, int(extended._id_in_cluster), int(extended._num_workers))
    collectives.check_worker_facts(facts)


def restore_default_sigterm() -> None:
    """TensorFlow (2.21) installs a C-level SIGTERM handler with the strategy that logs "SIGTERM caught" and
    carries on, so a stop or a preemption would wait out the whole grace period. Give SIGTERM back its default
    action, unless Python code installed a handler of its own (distlib's preemption handler installs its own
    later, at the first training step)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _initialize_multi_worker(wrapped, extended, args, kwargs):
    """The wrapt wrapper of ``CollectiveAllReduceExtended._initialize_multi_worker(cluster_resolver)``."""
    cluster_resolver = args[0] if args else kwargs["cluster_resolver"]
    enabled = collective_startup.enabled_for()
    started = eager_context.started()
    if enabled is not None and started and _same_cluster(cluster_resolver, enabled):
        extended._std_server_started = True  # collective_startup started it with this cluster's server def
        extended._enable_check_health = False  # the coordination service watches peers (as upstream does)
    counts = collectives.gpu_counts_from_env()  # the launcher's view: checked before anything starts
    if counts is not None:
        collectives.check_equal_gpu_counts(counts, collectives.ENV_GPU_COUNTS)
    if not eager_context.started():  # it will connect to the other workers now
        send_status("waiting", "setting up MultiWorkerMirroredStrategy")
        seen = _task_of(cluster_resolver)
        if seen is not None:
            leader_wait.wait_for_leader(seen)
    result = wrapped(*args, **kwargs)
    restore_default_sigterm()
    if eager_context.executing_eagerly() and getattr(extended, "_num_workers", 1) > 1:
        check_devices_agree(extended)
    send_status("running")
    return result


def install() -> None:
    """Install the wrapper (idempotent: ``import_hooks.wrap_once``)."""
    consequence = "no 'waiting' status, leader wait or GPU-count check for the strategy"
    if not (internals.available("mwms_patch", consequence) and eager_context.usable(consequence)):
        return
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars

    wrap_once(cars.CollectiveAllReduceExtended, "_initialize_multi_worker", _initialize_multi_worker)
