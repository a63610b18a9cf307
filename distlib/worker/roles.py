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
  on the coordinator, fails with a message naming what works: ``compat/keras3/fit_guard``).

Nothing here imports TensorFlow before the task needs it.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from nbworkers.distlib.cluster import TaskInfo, task
from nbworkers.distlib.compat import evaluator
from nbworkers.distlib.compat.import_hooks import when_imported
from nbworkers.distlib.reporting import reporter
from nbworkers.distlib.worker.status import send_status
from nbworkers.protocol import env_settings, wire
from nbworkers.protocol.statuses import WorkerStatus

ENV_SERVE = env_settings.SERVE.name  # "1": run this task's TensorFlow server instead of the cell (set by the launcher)
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
    """The evaluator's patches (``compat/evaluator.py``): a local strategy there, its evaluations reported."""
    when_imported("tensorflow", lambda _module: evaluator.local_strategy())
    evaluator.report_estimator_evaluations(_report_evaluation)


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


def _report_evaluation(result: Any) -> None:
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
