"""Where a distributed training step ends, though the cell never says so.

A session's Stop pauses every worker at the same step (``worker/session.py``, ``step_point``). Cells that call
``report()`` give such points; most custom loops, and a plain Keras ``fit``, do not. So the start of every *eager*
call that runs one step across the workers is one too (``on_step`` runs before the call: a worker that stops there
left no step half-done, and the cell's own bookkeeping of the steps before it is complete):

- a call of a ``tf.function`` whose trace ran a strategy's ``run`` or ``reduce`` (known once its first call traced
  it): a custom loop's ``train_step``, Keras' train, test and predict functions. Calls made while another function
  traces or runs are not counted (the outermost one is the step);
- an eager ``strategy.run`` or ``strategy.reduce`` (outside any ``tf.function``);
- an Estimator's training step (TensorFlow 2.15 environments): ``Estimator.train`` gets one more hook, whose
  ``before_run`` is the point (``train_and_evaluate`` trains through ``train``).

Only the main thread's calls count: the cell runs there, and a ``KeyboardInterrupt`` raised from ``on_step`` ends it.

Private: ``tf.function``'s class, wrapped at ``Function.__call__`` (there is no public hook on a function's calls, and a
``KeyboardInterrupt`` cannot reach a running ``tf.function``: tensorflow/tensorflow#28786). ``tf.distribute.Strategy``'s
``run`` and ``reduce`` are public (wrapped on that class: every strategy of TensorFlow 2 inherits them from it).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from nbworkers.distlib.compat import import_hooks, internals

FUNCTION_MODULE = "tensorflow.python.eager.polymorphic_function.polymorphic_function"
ESTIMATOR_MODULE = "tensorflow_estimator.python.estimator.estimator"
CONSEQUENCE = "a session's Stop pauses the workers only where the cell calls report()"


class StepCalls:
    """Calls ``on_step`` before each step call of the main thread (``install`` wires it in)."""

    def __init__(self, on_step: Callable[[], None]):
        self.on_step = on_step
        self.steps: weakref.WeakSet[Any] = weakref.WeakSet()  # the functions whose trace ran a strategy step
        self._depth = 0  # eager step calls under way on the main thread (nested calls are part of the outer one)
        self._ran_step = False  # a strategy's run/reduce was called inside the outermost call
        self.in_step = False  # the main thread is inside a known step (read by other threads: a Stop's pause)

    def function_call(self, inside_function: Callable[[], bool]):
        """The wrapt wrapper of ``Function.__call__``."""

        def call(wrapped, instance, args, kwargs):
            if not _main_thread() or self._depth or inside_function():
                return wrapped(*args, **kwargs)
            known = instance in self.steps
            if known:
                self.on_step()  # (a Stop raises here, before the step: on every worker at the same one)
            self._depth, self._ran_step, self.in_step = 1, False, known
            try:
                result = wrapped(*args, **kwargs)
                if self._ran_step:
                    self.steps.add(instance)
            finally:
                self._depth, self.in_step = 0, False
            return result

        return call

    def strategy_call(self, inside_function: Callable[[], bool]):
        """The wrapt wrapper of ``Strategy.run`` and ``Strategy.reduce``."""

        def call(wrapped, instance, args, kwargs):
            if not _main_thread():
                return wrapped(*args, **kwargs)
            if self._depth:  # traced (or run eagerly) inside an outermost function call: that call is the step
                self._ran_step = True
                return wrapped(*args, **kwargs)
            if inside_function():  # a function this process traces some other way
                return wrapped(*args, **kwargs)
            self.on_step()
            self._depth, self.in_step = 1, True  # functions the strategy makes and calls itself are part of this step
            try:
                return wrapped(*args, **kwargs)
            finally:
                self._depth, self.in_step = 0, False

        return call

    def estimator_train(self, hook_class: type):
        """The wrapt wrapper of ``Estimator.train(input_fn, hooks=None, ...)``: one more hook, a step point before
        each of its training steps."""
        calls = self

        class StepPoint(hook_class):  # type: ignore[misc, valid-type]  # tf.estimator's SessionRunHook
            def before_run(self, run_context):
                if _main_thread():
                    calls.on_step()
                    calls.in_step = True

            def after_run(self, run_context, run_values):
                calls.in_step = False

        def call(wrapped, instance, args, kwargs):
            if len(args) >= 2:  # train(input_fn, hooks, ...)
                args = (args[0], [*(args[1] or []), StepPoint()], *args[2:])
            else:
                kwargs = {**kwargs, "hooks": [*(kwargs.get("hooks") or []), StepPoint()]}
            return wrapped(*args, **kwargs)

        return call


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def install(on_step: Callable[[], None]) -> StepCalls:
    """Make every step call of this process's main thread call ``on_step`` first, once TensorFlow is imported (now, if
    it is). Where TensorFlow moved what this wraps, nothing is wrapped and one warning says so (``internals``)."""
    calls = StepCalls(on_step)

    def wrap(tf) -> None:
        if not internals.available("step_calls", CONSEQUENCE):
            return
        import importlib

        function_class = importlib.import_module(FUNCTION_MODULE).Function
        import_hooks.wrap_once(function_class, "__call__", calls.function_call(tf.inside_function))
        strategy_call = calls.strategy_call(tf.inside_function)
        for name in ("run", "reduce"):
            import_hooks.wrap_once(tf.distribute.Strategy, name, strategy_call)

    def wrap_estimator(module) -> None:
        if not internals.available("step_calls.estimator", CONSEQUENCE + " in an Estimator's training"):
            return
        import tensorflow as tf

        import_hooks.wrap_once(module.Estimator, "train", calls.estimator_train(tf.compat.v1.train.SessionRunHook))

    import_hooks.when_imported("tensorflow", wrap)
    import_hooks.when_imported(ESTIMATOR_MODULE, wrap_estimator)
    return calls
