"""Configure collective ops and the coordination service when TensorFlow's eager context starts, exactly as
MultiWorkerMirroredStrategy would: the private half of ``distlib.worker.mwms.collective_startup`` (which decides
whether a cell wants it, and reports status around it).

``arm(task, before_connect, after_connect, on_configured)`` replaces ``ensure_initialized`` on the one context
object (an instance attribute, removed at its first call: the op path keeps no wrapper, other contexts are never
touched). Group ``collectives_at_start`` in ``internals``.
"""

from __future__ import annotations

import copy
import sys
import types
from typing import Any, Callable

from nbworkers.distlib.cluster import TRAINING_JOBS, TaskInfo
from nbworkers.distlib.compat import eager_context, internals


def server_def_for_collectives(info: TaskInfo) -> Any:
    """What MultiWorkerMirroredStrategy would configure, from the context config as it is now."""
    from tensorflow.core.protobuf import tensorflow_server_pb2
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.eager import context
    from tensorflow.python.training import server_lib

    ctx = context.context()
    spec = multi_worker_util.normalize_cluster_spec(server_lib.ClusterSpec(info.cluster))
    ctx.configure_collective_ops(
        collective_leader=multi_worker_util.collective_leader(spec, info.type, info.index),
        scoped_allocator_enabled_ops=("CollectiveReduce",),
        device_filters=(f"/job:{info.type}/task:{info.index}",),
    )
    if ctx.coordination_service is None:
        jobs = [
            cars.coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
            for job in TRAINING_JOBS
            if job in spec.jobs
        ]
        ctx.configure_coordination_service(
            service_type="standalone",
            service_leader=multi_worker_util.coordination_leader(spec),
            coordinated_jobs=jobs,
        )
    # CollectiveAllReduceExtended._update_config_proto only reads these four attributes in eager mode.
    strategy_like = types.SimpleNamespace(
        _communication_options=None, _cluster_spec=spec, _task_type=info.type, _task_id=info.index
    )
    session_config = cars.CollectiveAllReduceExtended._update_config_proto(strategy_like, copy.deepcopy(ctx.config))
    return tensorflow_server_pb2.ServerDef(
        cluster=spec.as_cluster_def(),
        default_session_config=session_config,
        job_name=info.type,
        task_index=info.index,
        protocol="grpc",
        port=0,
    )


def arm(info: TaskInfo, *, before_connect: Callable[[], None], after_connect: Callable[[], None],
        on_configured: Callable[[], None]) -> bool:
    """At the first start of the eager context: configure collectives for ``info`` (then ``on_configured()``),
    ``before_connect()``, start the context (it connects to the other workers), ``after_connect()``. False
    (nothing armed) when the context already started, runs in graph mode, or the symbols are gone."""
    consequence = "create the strategy before any TensorFlow op"
    if not (internals.available("collectives_at_start", consequence) and eager_context.usable(consequence)):
        return False
    from tensorflow.python.eager import context

    ctx = context.context()
    if eager_context.started() or ctx.executing_eagerly() is False:
        return False  # already started (or graph mode): the normal upstream rules apply
    original = type(ctx).ensure_initialized

    def ensure_initialized_then_disarm() -> None:
        if eager_context.started():  # started meanwhile by someone else
            ctx.__dict__.pop("ensure_initialized", None)
            return original(ctx)
        with ctx._initialize_lock:
            if not eager_context.started() and ctx._collective_ops_server_def is None and ctx._server_def is None:
                try:
                    server_def = server_def_for_collectives(info)
                except Exception as error:  # an internal API moved: fall back to upstream behaviour
                    sys.stderr.write(f"nbworkers: could not set up collectives early ({error!r}); create the"
                                     " strategy before any TensorFlow op.\n")
                    server_def = None
                if server_def is not None:
                    ctx.enable_collective_ops(server_def)  # stored; applied by the start below
                    on_configured()
        before_connect()
        original(ctx)
        ctx.__dict__.pop("ensure_initialized", None)
        after_connect()

    ctx.ensure_initialized = ensure_initialized_then_disarm
    return True
