"""A worker's side of a stop: SIGINT from its host is a ``KeyboardInterrupt`` in the main thread.

The host stops a worker with SIGINT first (``procs.kill.interrupt_group``), then SIGTERM after
``NBWORKERS_STOP_INTERRUPT_GRACE`` seconds if it is still there, then SIGKILL at the ``stop_grace`` setting.
``install()`` (the bootstrap, in the main thread) makes the first of these a ``KeyboardInterrupt`` raised where
the cell is, so its ``finally:`` blocks and ``with`` exits run, then the bootstrap's end and ``atexit``. Once it
has been raised, SIGTERM is ignored: the cell's clean-up gets until SIGKILL, not until the host's SIGTERM. A
worker that never gets back to Python (blocked in C code, a collective whose peer is gone) cannot raise it: the
SIGTERM that follows ends it.

Workers never get the notebook's Interrupt (their hosts run in sessions of their own), so a SIGINT is a stop.
A session worker interrupts its own cells with SIGINT too: it says so first (``own_interrupt``), and only a
SIGINT it did not announce is a stop. While distlib saves on preemption (``preemption.py``, a training loop with a
checkpoint), that handler takes SIGINT as it takes SIGTERM: save at the next step, then leave.

Where workers must leave at one step (JAX: a worker that leaves a collective its peers are in leaves them blocked, and
Keras' own clean-up after an interrupted fit waits on them), the SIGINT is ``deferred()``: it is noted and nothing is
raised until the caller raises it at a step every worker agreed on (``take_pending``, ``distlib/frameworks/jax_stop``).

A worker ended this way exits with ``STOPPED_EXIT_CODE`` and reports no failure (the bootstrap): the kernel, which
asked for the stop, records it as stopped.

Python runs a signal's handler wherever the main thread is, a garbage collection's callback included, and drops an
exception raised there ("Exception ignored in ..."): JAX registers one (``_xla_gc_callback``), and TensorFlow 2.21's
import imports JAX whenever it is installed. A stop's ``KeyboardInterrupt`` that landed there was lost, and the
worker ran on until SIGKILL at the stop grace (CI, 2026-11-29: ``test_worker_stop``'s forked report() loop, its
``finally:`` never run). ``install()`` also hooks ``sys.unraisablehook``: a dropped interrupt of ``on_sigint``'s
comes again ``REDELIVERY_DELAY_S`` later, from a timer thread, once the main thread is back in the cell.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STOPPED_EXIT_CODE = 128 + signal.SIGINT  # as a shell reports a process ended by SIGINT (the kernel reads -2)
REDELIVERY_DELAY_S = 0.05  # a dropped interrupt comes again after this (the main thread out of the callback)

_stop_requested = False
_own_interrupts = 0  # SIGINTs the session worker announced for its own cell interrupts
_deferring = 0  # inside deferred(): a SIGINT is noted (_pending), not raised
_pending = False
_raised = ""  # what on_sigint's last KeyboardInterrupt was: "stop", or "own" (a session's interrupt of its cell)
_lock = threading.Lock()


def requested() -> bool:
    """Has the host asked this worker to stop?"""
    return _stop_requested


def install() -> None:
    """Make the host's SIGINT a stop (main thread only; a spawned worker may have inherited SIGINT ignored, and one
    started from a thread that blocks it, SIGINT blocked: a Ray actor's methods run in such threads, and a process
    started there passes the mask on, a node zygote to every worker it forks)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, on_sigint)
    if sys.unraisablehook is not _on_unraisable:
        _on_unraisable.previous = sys.unraisablehook  # type: ignore[attr-defined]
        sys.unraisablehook = _on_unraisable


def _on_unraisable(unraisable: Any) -> None:
    """A ``KeyboardInterrupt`` of ``on_sigint``'s that Python dropped (raised in a garbage collection's callback, a
    ``__del__``, a weakref's callback): say so in the log and interrupt the main thread again shortly, as the same
    kind (a stop, or the session's own interrupt). Anything else: the hook there was before."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _raised:
        where = getattr(unraisable.object, "__qualname__", None) or type(unraisable.object).__name__
        print(f"--- nbworkers: the interrupt landed in {where}, where Python drops it: interrupting again",
              file=sys.stderr, flush=True)
        again = threading.Timer(REDELIVERY_DELAY_S, _interrupt_again, args=(_raised,))
        again.daemon = True  # (nothing waits for it at the interpreter's exit)
        again.start()
        return
    getattr(_on_unraisable, "previous", sys.__unraisablehook__)(unraisable)


def _interrupt_again(kind: str) -> None:
    if kind == "own":
        own_interrupt()
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)


def own_interrupt() -> None:
    """The next SIGINT is the process's own (a session worker interrupting its cell), not a stop."""
    global _own_interrupts
    with _lock:
        _own_interrupts += 1


def take_own_interrupt() -> bool:
    """True once for each ``own_interrupt()``: the SIGINT being handled was announced."""
    global _own_interrupts
    with _lock:
        if _own_interrupts <= 0:
            return False
        _own_interrupts -= 1
        return True


def note_stop(hold_sigterm: bool = True) -> None:
    """The host asked this worker to stop: remember it, and (``hold_sigterm``) from now on ignore SIGTERM (the
    clean-up that follows runs until it ends, or until SIGKILL at the stop grace)."""
    global _stop_requested
    _stop_requested = True
    if not hold_sigterm:  # (preemption.py: its own handler takes the SIGTERM that follows)
        return
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:  # not the main thread (handlers always run there; kept for safety)
        pass


def reassert_sigterm() -> None:
    """TensorFlow (2.21) installs a C-level SIGTERM handler when its coordination service starts (with
    MultiWorkerMirroredStrategy, or at the first op of a cell whose collectives ``collective_startup`` set up early:
    any cell that calls ``distlib.report()``) that logs "SIGTERM caught" and carries on, so a stop would wait out
    the whole stop grace. Give SIGTERM back the disposition Python knows of (the default, a stop's SIG_IGN, or a
    Python handler such as ``preemption``'s). Main thread only; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGTERM)
    if current is not None:  # (None: set from C before Python looked: nothing of Python's to give back)
        signal.signal(signal.SIGTERM, current)


def on_sigint(signum: int, frame: Any) -> None:
    """SIGINT's handler: a stop (``KeyboardInterrupt`` now); an announced interrupt of the process's own raises
    ``KeyboardInterrupt`` too, without the stop. Inside ``deferred()`` it is only noted (``pending``)."""
    global _pending, _raised
    own = take_own_interrupt()
    if not own:
        note_stop()
    if _deferring:
        _pending = True
        return
    _raised = "own" if own else "stop"
    raise KeyboardInterrupt


def pending() -> bool:
    """Is a SIGINT waiting to be raised (one came inside ``deferred()``)?"""
    return _pending


def take_pending() -> bool:
    """True once for a SIGINT that came inside ``deferred()``: the caller raises its ``KeyboardInterrupt`` now."""
    global _pending
    was, _pending = _pending, False
    return was


@contextmanager
def deferred() -> Iterator[None]:
    """Inside, a SIGINT is noted and not raised; one still pending when the block ends normally is raised then."""
    global _deferring
    _deferring += 1
    try:
        yield
    except BaseException:
        if _deferring == 1:
            take_pending()  # the block ended with its own exception (the agreed KeyboardInterrupt, an error)
        raise
    finally:
        _deferring -= 1
    if not _deferring and take_pending():
        raise KeyboardInterrupt
