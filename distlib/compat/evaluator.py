"""The evaluator task's two patches (``distlib.worker.roles`` decides when; this holds the private symbols).

- ``local_strategy()``: MultiWorkerMirroredStrategy built on the evaluator, which is outside the training cluster
  (upstream: ``KeyError: 'evaluator'``), becomes a local one-worker strategy
  (``CollectiveAllReduceExtended._initialize_strategy``). Group ``evaluator``.
- ``report_estimator_evaluations(report)``: every ``Estimator.evaluate()`` result is handed to ``report`` (the
  notebook sees the evaluator's metrics), once ``tf.estimator`` (TensorFlow 2.15 environments) is imported.
  Group ``evaluator.estimator``.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, Callable

from nbworkers.distlib.compat import internals
from nbworkers.distlib.compat.import_hooks import when_imported, wrap_once

ESTIMATOR_MODULE = "tensorflow_estimator.python.estimator.estimator"


def local_strategy() -> None:
    """MultiWorkerMirroredStrategy on the evaluator (outside the training cluster): one local worker."""
    if not internals.available("evaluator", "MultiWorkerMirroredStrategy on the evaluator stays upstream's"):
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


_report: Callable[[Any], None] | None = None  # where each evaluation's result goes


def report_estimator_evaluations(report: Callable[[Any], None]) -> None:
    """Hand each ``Estimator.evaluate()`` result to ``report`` (now, or once tf.estimator is imported)."""
    global _report
    _report = report
    when_imported(ESTIMATOR_MODULE, _patch_estimator)


def _patch_estimator(module: ModuleType) -> None:
    if getattr(module, "Estimator", None) is None:
        return
    if not internals.available("evaluator.estimator", "the evaluator's evaluations are not reported to the notebook"):
        return
    wrap_once(module.Estimator, "evaluate", _evaluate_and_report)


def _evaluate_and_report(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    try:
        if _report is not None:
            _report(result)
    except Exception as error:  # reporting must never break the evaluation
        print(f"nbworkers: could not report the evaluation ({error!r})", file=sys.stderr)
    return result
