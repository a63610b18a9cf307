"""TensorFlow's eager context, as the workers ask about it: has it started, is the coordination service up,
abort the collectives, exchange small values through the coordination service's key-value store.

The one place that reads ``Context._context_handle`` (set when the runtime, its thread pools and perhaps CUDA
started): the zygote's fork guard, the session worker's abort, the device-facts exchange, the MWMS wrapper and
the early collectives all call ``started()``. Groups in ``internals``: ``eager_context`` (the started check),
``eager_context.abort`` and ``eager_context.store``. Nothing here imports TensorFlow: a process that has not
imported it has no context (``started()`` is False), and the other functions are called once it runs.
"""

from __future__ import annotations

import sys
from typing import Any

from nbworkers.distlib.compat import internals

CONTEXT_MODULE = internals.CONTEXT


def missing() -> list[str]:
    """The names of the started check's symbols that this TensorFlow lacks (empty: ``started()`` can be trusted)."""
    return [entry.name for entry, _ in internals.missing("eager_context")]


def usable(consequence: str) -> bool:
    """``started()`` can be trusted here; else warn once, naming ``consequence``, and return False."""
    return internals.available("eager_context", consequence)


def started() -> bool:
    """Has TensorFlow's eager context (runtime, thread pools, CUDA) started in this process? Never creates a
    context and never imports TensorFlow: False when it is not imported or has no context object yet."""
    context = sys.modules.get(CONTEXT_MODULE)
    if context is None:
        return False
    context_safe = getattr(context, "context_safe", None)  # gone: missing() says so, the zygote refuses forks
    ctx = context_safe() if context_safe is not None else None
    return ctx is not None and getattr(ctx, "_context_handle", None) is not None


def _context() -> Any:
    from tensorflow.python.eager import context

    return context.context()


def executing_eagerly() -> bool:
    from tensorflow.python.eager import context

    return bool(context.executing_eagerly())


def coordination_service_running(consequence: str) -> bool:
    """The context started and its coordination service (MultiWorkerMirroredStrategy's) is up. False, with one
    warning naming ``consequence``, when the symbols this needs are gone."""
    if not (usable(consequence) and internals.available("eager_context.store", consequence)) or not started():
        return False
    return _context().coordination_service is not None


def store_put(key: str, value: str) -> None:
    """Publish ``value`` under ``key`` in the coordination service's key-value store."""
    _context().set_config_key_value(key, value)


def store_get(key: str, timeout_ms: int) -> str:
    """The value another worker published under ``key``; raises (DeadlineExceeded, ...) after ``timeout_ms``."""
    return _context().get_config_key_value(key, timeout_ms)


def barrier(name: str, timeout_ms: int) -> None:
    """Wait until every task of the coordination service reached the barrier ``name``."""
    _context().wait_at_barrier(name, timeout_ms)


def abort_collectives(reason: str, consequence: str) -> bool:
    """Abort this process's collective ops (they stay unusable here afterwards) so that a thread blocked in one
    returns. Never starts a context (it may run on another thread than TensorFlow's). True when aborted."""
    if "tensorflow" not in sys.modules:
        return False
    if not (usable(consequence) and internals.available("eager_context.abort", consequence)):
        return False
    if not started():
        return False
    from tensorflow.python.framework import errors

    _context().abort_collective_ops(errors.UNAVAILABLE, reason)
    return True
