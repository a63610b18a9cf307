"""What a worker process does for its role (``TF_CONFIG`` task type), beyond running the cell.

``run_role()`` is called by the bootstrap right before the cell:

- a task the launcher marked as a server (``NBWORKERS_SERVE=1``: the ``worker`` and ``ps`` tasks of a
  ParameterServerStrategy cluster, ``%%worker --ps N``) does not run the cell: it starts the standard
  TensorFlow server of its task, as TensorFlow's parameter-server tutorial does, and serves until it is
  stopped (the coordinator, the chief, drives it; the kernel stops it when the coordinator is done).
  ``run_role()`` then never returns;
- the ``evaluator`` task gets two things before its cell runs: MultiWorkerMirroredStrategy built there (the
  Estimator tutorial builds it on every task) becomes a local one-worker strategy, since the evaluator is
  outside the training cluster (upstream it fails with ``KeyError: 'evaluator'``); and every Estimator
  ``evaluate()`` result (``train_and_evaluate``'s evaluations of each new checkpoint) is reported to the
  notebook as the evaluator's metrics, at the checkpoint's global step;
- every other task returns at once: the cell runs as usual (Keras 3's ``fit`` under ParameterServerStrategy,
  on the coordinator, fails with a message naming what works: ``keras_compat``).

Nothing here imports TensorFlow before the task needs it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import ModuleType
from typing import Any

from nbworkers.distlib.cluster import TaskInfo, task
from nbworkers.distlib.compat.import_hooks import when_imported, wrap_once
from nbworkers.protocol import env_settings
from nbworkers.protocol.statuses import WorkerStatus

ENV_SERVE = env_settings.SERVE.name  # "1": run this task's TensorFlow server instead of the cell (set by the launcher)
ESTIMATOR_MODULE = "tensorflow_estimator.python.estimator.estimator"
SERVER_IDLE_SLEEP_S = 3600.0  # the main thread's sleep between wake-ups while the server thread serves


def serves(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(ENV_SERVE, "") not in ("", "0")


def run_role() -> bool:
    """Do what this task's role needs before the cell (see the module docstring). False: run the cell."""
    if serves():
        serve()
        return True
    try:
        info = task()
    except Exception:
        return False  # a broken TF_CONFIG: strategy() / task() in the cell say what is wrong
    if info.is_evaluator:
        prepare_evaluator(info)
    return False


# ------------------------------------------------------------------------------------------------ servers
def serve(info: TaskInfo | None = None) -> None:
    """Start this task's TensorFlow server and serve until the process is stopped (never returns)."""
    info = info or task()
    if info.type not in ("worker", "ps"):
        raise RuntimeError("only worker and ps tasks run a TensorFlow server for ParameterServerStrategy, "
                           f"not {info.type!r}")
    # As TensorFlow's parameter-server tutorial: lets the coordinator see a worker or ps failure.
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    import tensorflow as tf

    from nbworkers.distlib.worker.status import send_status

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    tf.distribute.Server(
        resolver.cluster_spec(), job_name=info.type, task_index=info.index,
        protocol=resolver.rpc_layer or "grpc", start=True,
    )
    address = info.cluster[info.type][info.index]
    print(f"nbworkers: {info.type} {info.index} serves at {address}; the chief (coordinator) drives it", flush=True)
    send_status(WorkerStatus.RUNNING, f"TensorFlow server ({info.type} {info.index}) at {address}")
    # Serving happens on TensorFlow's threads. The main thread sleeps instead of `server.join()` (a C++ call
    # that never returns): SIGTERM and SIGUSR1 (stack dumps) keep working.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        time.sleep(SERVER_IDLE_SLEEP_S)


# ------------------------------------------------------------------------------------------------ evaluator
def prepare_evaluator(info: TaskInfo) -> None:
    when_imported("tensorflow", lambda _module: local_strategy_on_evaluator())
    when_imported(ESTIMATOR_MODULE, report_evaluations)


def local_strategy_on_evaluator() -> None:
    """MultiWorkerMirroredStrategy on the evaluator (outside the training cluster): one local worker."""
    from nbworkers.distlib.compat import internals

    if not internals.available("roles", "MultiWorkerMirroredStrategy on the evaluator stays upstream's"):
        return
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars

    wrap_once(cars.CollectiveAllReduceExtended, "_initialize_strategy", _initialize_strategy_on_evaluator)


def _initialize_strategy_on_evaluator(wrapped, extended, args, kwargs):
    """wrapt wrapper of ``CollectiveAllReduceExtended._initialize_strategy(cluster_resolver, devices)``."""

    def arguments(cluster_resolver, devices):
        return cluster_resolver, devices

    cluster_resolver, devices = arguments(*args, **kwargs)
    if not devices and getattr(cluster_resolver, "task_type", None) == "evaluator":
        spec = cluster_resolver.cluster_spec().as_dict()
        if "evaluator" not in spec:
            return extended._initialize_local(cluster_resolver, devices=None)
    return wrapped(*args, **kwargs)


def evaluation_metrics(result: dict[str, Any]) -> tuple[int | None, dict[str, float]]:
    """(global step, numeric metrics) of an Estimator ``evaluate()`` result."""
    step = result.get("global_step")
    metrics: dict[str, float] = {}
    for name, value in result.items():
        if name == "global_step":
            continue
        try:
            metrics[str(name)] = float(value)
        except (TypeError, ValueError):
            continue
    try:
        step = int(step) if step is not None else None
    except (TypeError, ValueError):
        step = None
    return step, metrics


def report_evaluations(module: ModuleType) -> None:
    """Wrap ``Estimator.evaluate`` so each evaluation's metrics reach the notebook (evaluator task only)."""
    from nbworkers.distlib.compat import internals

    if getattr(module, "Estimator", None) is None:
        return
    if not internals.available("roles.estimator", "the evaluator's evaluations are not reported to the notebook"):
        return
    wrap_once(module.Estimator, "evaluate", _evaluate_and_report)


def _evaluate_and_report(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    try:
        _report_evaluation(result)
    except Exception as error:  # reporting must never break the evaluation
        print(f"nbworkers: could not report the evaluation ({error!r})", file=sys.stderr)
    return result


def _report_evaluation(result: Any) -> None:
    from nbworkers.distlib.reporting import reporter
    from nbworkers.protocol import wire

    if not isinstance(result, dict):
        return
    step, metrics = evaluation_metrics(result)
    fields = {"metrics": metrics, "step": step, "epoch": None, "steps_total": None, "epochs_total": None}
    reporter().report(fields, force=True)  # metric names such as "epoch" stay apart from the fields
    sender = wire.process_sender()
    if sender is not None and step is not None:
        sender.send("status", state=WorkerStatus.RUNNING.value, detail=f"evaluated the checkpoint of step {step}")


# ------------------------------------------------------------------------------------------------ strategy
class RoleStrategyError(RuntimeError):
    """``distlib.strategy()`` was asked for on a task that does not run training code for its role."""


def role_strategy(info: TaskInfo):
    """``distlib.strategy()`` for the roles: ParameterServerStrategy on the coordinator (the chief of a
    cluster with parameter servers), a local MirroredStrategy on the evaluator."""
    import tensorflow as tf

    if info.is_evaluator:
        return tf.distribute.MirroredStrategy()
    if info.is_coordinator:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.ParameterServerStrategy(resolver)
    raise RoleStrategyError(
        f"this is {info.type} {info.index} of a cluster with parameter servers: under ParameterServerStrategy only "
        "the chief (the coordinator) runs training code; workers and parameter servers run TensorFlow servers "
        "(%%worker --ps starts them so). A cluster with parameter servers needs a 'chief' task: %%worker --ps N "
        "adds one."
    )
