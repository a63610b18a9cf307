"""A Stop of a Keras fit on JAX ends every worker after the same step, so that each runs its ``finally:``.

Why: a worker interrupted between two steps leaves its peers blocked in the next step's collective (gloo waits for
it), and Keras' own clean-up after an interrupted fit (``jax_state_sync``) waits on that step: nobody's ``finally:``
would run before the host's SIGKILL. So during ``Model.fit`` (wrapped once, ``install``) the host's SIGINT is only
noted (``stop_signal.deferred``), and a callback put first in the fit's list, at each step's end:

- does nothing while no stop is pending (no cost to training);
- at the first step's end after the SIGINT, writes that step into JAX's coordination service's key-value store
  (``compat/jax/backends.store``) and trains on, reading the store at each step's end (one small request) until
  every worker's step is there: each got its SIGINT from its own host at the same moment;
- every worker leaves after the step ``T`` = the last of those steps + 1, raising the ``KeyboardInterrupt`` there.

Why every worker knows ``T`` before it passes it: on CPU a step runs in the call that dispatches it, so no worker
ends step ``k + 1`` before every peer ended step ``k`` and ran this callback there. A worker that wrote step ``s``
did so before it started step ``s + 1``; a peer ends step ``s + 1`` only after that, and reads ``s`` then at the
latest: at ``max + 1`` = ``T`` every worker has read every step.

Without the store (one process, JAX's symbols moved) or when a peer never answers, the worker leaves where it is.

In a session the callback is also each step's ``step_points.reached()``: a session cell's Stop is the session's own
(the kernel pauses every worker, then names the step they raise at: ``worker/session.py``), as for TensorFlow's
distributed step calls.
"""

from __future__ import annotations

import functools
import time
from typing import Any, cast

from nbworkers.distlib.compat.jax import backends as jax_backends
from nbworkers.distlib.worker import step_points, stop_signal

AGREE_TIMEOUT_S = 2.0  # how long a stopped worker trains on without every peer's step (each has its SIGINT within ms)
WRAPPED = "__nbworkers_common_stop__"

_fits = 0  # fit calls in this process (the same on every worker): their store keys apart


def install() -> None:
    """Wrap ``keras.Model.fit`` (once): a common stop while it runs on more than one process."""
    import keras

    fit = keras.Model.fit
    if getattr(fit, WRAPPED, False):
        return

    @functools.wraps(fit)
    def fit_with_common_stop(self: Any, *args: Any, **kwargs: Any) -> Any:
        import jax

        if jax.process_count() < 2 or jax_backends.store() is None:
            return fit(self, *args, **kwargs)
        global _fits
        _fits += 1
        callback = common_stop_callback(f"nbworkers/stop/{_fits}", jax.process_index(), jax.process_count())
        args, kwargs = _with_first_callback(fit, self, args, kwargs, callback)
        with stop_signal.deferred():
            return fit(self, *args, **kwargs)

    setattr(fit_with_common_stop, WRAPPED, True)
    keras.Model.fit = fit_with_common_stop  # type: ignore[method-assign]


def _with_first_callback(fit: Any, model: Any, args: tuple, kwargs: dict, callback: Any) -> tuple[tuple, dict]:
    import inspect

    bound = inspect.signature(fit).bind(model, *args, **kwargs)
    given = bound.arguments.get("callbacks")
    if given is None or isinstance(given, (list, tuple)):
        bound.arguments["callbacks"] = [callback, *(given or [])]
    return bound.args[1:], bound.kwargs


def common_stop_callback(prefix: str, rank: int, processes: int) -> Any:
    """The fit's first callback (see the module's docstring)."""
    import keras

    class CommonStop(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.step = 0
            self.agreement: Agreement | None = None

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.step += 1
            step_points.reached()  # a session's Stop: the kernel's pause, at a step every worker agrees on
            if self.agreement is None:
                if not stop_signal.pending():
                    return
                self.agreement = Agreement(prefix, rank, processes, self.step)
            if self.agreement.leave_after(self.step) and stop_signal.take_pending():
                raise KeyboardInterrupt

    return CommonStop()


class Agreement:
    """One worker's side of the agreement (see the module's docstring)."""

    def __init__(self, prefix: str, rank: int, processes: int, step: int) -> None:
        self.prefix, self.rank, self.processes = prefix, rank, processes
        self.started = time.monotonic()
        self.last: int | None = None  # T, once every worker's step is known
        self.client = cast(Any, jax_backends.store())  # (None: its first call raises, the worker gives up)
        try:
            self.client.key_value_set(f"{prefix}/{rank}", str(step))
        except Exception as error:
            self.give_up(step, error)

    def leave_after(self, step: int) -> bool:
        """Is ``step`` (just ended) the one to leave after?"""
        if self.last is None:
            try:
                steps = [int(value) for _, value in self.client.key_value_dir_get(self.prefix + "/")]
            except Exception as error:
                return self.give_up(step, error)
            if len(steps) >= self.processes:
                self.last = max(steps) + 1
            elif time.monotonic() - self.started > AGREE_TIMEOUT_S:
                return self.give_up(step, TimeoutError(f"{len(steps)} of {self.processes} workers answered"))
            else:
                return False
        return step >= self.last

    def give_up(self, step: int, error: BaseException) -> bool:
        print(f"nbworkers: the workers did not agree on a step to stop at ({type(error).__name__}: {error}): worker "
              f"{self.rank} stops after its step {step}", flush=True)
        self.last = step
        return True
