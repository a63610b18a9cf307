"""Save a checkpoint when a worker is asked to leave (SIGTERM), then leave so the whole group restarts.

Built on ``tf.distribute.experimental.PreemptionCheckpointHandler`` (PCH): the worker that gets SIGTERM
tells the others through TensorFlow's coordination service, every worker saves at the same step, then each
exits with code 42 (PCH's restart code; the ``%%worker`` supervisor restarts the group on it and the
restarted run resumes from that checkpoint).

``distlib.fit(..., checkpoint_dir=)`` and ``TrainingCheckpoint.steps()`` use it on their own; nothing to do
in the cell. What we add around PCH:

- one PCH per process, made at the first training step and reused (its coordination-service keys cannot be
  reset, so a second handler in the same cluster would be broken);
- the save is ours (``save_fn``: ``TrainingCheckpoint.save`` with the epoch and the step reached), PCH only
  picks the step; it never restores or writes anything itself;
- SIGTERM is handled only while a training loop runs. Outside one it kills as usual. A second SIGTERM kills
  at once. The signal is seen by a thread (``signal.set_wakeup_fd``), so a worker stuck in a collective
  (a peer died) still reacts: when no training step finishes for ``NBWORKERS_PREEMPTION_WAIT`` seconds (or 3
  step times, whichever is longer) it leaves without a save, killed by SIGTERM as it would have been
  without us. ``NBWORKERS_PREEMPTION_SAVE_TIMEOUT`` caps the whole wait.
- A stop from the worker's host starts with SIGINT (``stop_signal``: elsewhere a ``KeyboardInterrupt``); while a
  training loop runs it is taken as SIGTERM is (save at the same step, then leave), and the host's SIGTERM that
  follows it is part of the same stop, not a second one. A SIGINT is seen in the main thread (Python runs
  handlers there), so a worker blocked in C code sees the stop at the host's SIGTERM. A SIGINT the process
  announced as its own (a session interrupting its cell) stays a ``KeyboardInterrupt``. When the loop ends before
  the save step, a stop that began with SIGINT leaves with ``KeyboardInterrupt`` (``finally:`` blocks run).
- ``NBWORKERS_PREEMPTION``: ``auto`` (default: on for workers of a cluster), ``1`` (also without TF_CONFIG),
  ``0`` (off: SIGTERM kills as usual).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

from nbworkers.distlib.cluster import task
from nbworkers.distlib.compat import preemption_handler
from nbworkers.distlib.reporting import flush_reports
from nbworkers.distlib.worker import stop_signal
from nbworkers.distlib.worker.mwms import worker_facts
from nbworkers.protocol import env_settings, wire
from nbworkers.protocol.private.dirs import runtime_dir

ENV_PREEMPTION = env_settings.PREEMPTION.name
ENV_STEP_WAIT = env_settings.PREEMPTION_WAIT.name
ENV_SAVE_TIMEOUT = env_settings.PREEMPTION_SAVE_TIMEOUT.name
DEFAULT_STEP_WAIT_S = env_settings.PREEMPTION_WAIT.default  # no step finished for this long after SIGTERM: no save
DEFAULT_SAVE_TIMEOUT_S = env_settings.PREEMPTION_SAVE_TIMEOUT.default  # SIGTERM to exit, at most
STEP_TIME_FACTOR = 3.0  # ... or this many times the average step time, when longer
PREEMPTION_EXIT_CODE = wire.PREEMPTION_EXIT_CODE  # PCH's default; magics.failures.PREEMPTION_EXIT_CODES
WATCH_INTERVAL_S = 0.1


def enabled() -> bool:
    setting = env_settings.PREEMPTION.get()  # "auto", "1" or "0"
    if setting != "auto":
        return setting == "1"

    try:
        return task().in_cluster
    except Exception:
        return False


def _log(message: str) -> None:
    try:
        sys.stderr.write(f"nbworkers: {message}\n")
        sys.stderr.flush()
    except Exception:
        pass


def _die_by_sigterm() -> None:
    """Leave now, killed by SIGTERM as without any handler (callable from any thread)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    try:
        libc = ctypes.CDLL(None)
        libc.signal(signal.SIGTERM, ctypes.c_void_p(0))  # SIG_DFL, below Python's own handler table
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    finally:
        os._exit(128 + signal.SIGTERM)


class _PreemptionExit(SystemExit):
    """Raised in the training loop after the preemption checkpoint was saved."""


class PreemptionSaver:
    """The process's preemption handling; use ``saver()``, then ``with s.training(save_fn): ... s.step_done()``."""

    def __init__(self) -> None:
        self._handler: Any = None  # tf.distribute's PreemptionCheckpointHandler, made at the first training step
        self._save_fn: Callable[[], object] | None = None
        self._active = False
        self._lock = threading.Lock()
        self._term_at: float | None = None
        self._terms = 0
        self._asked_by: int | None = None  # the signal of the first leave request (SIGTERM, or a stop's SIGINT)
        self._previous_int_handler: Any = None
        self._last_step_at = time.monotonic()
        self._step_time = 0.0
        self._steps = 0
        self._previous_handler: Any = None
        self._wakeup_r: int | None = None
        self._previous_wakeup = -1
        self._wakeup_thread: threading.Thread | None = None
        self.saves = 0
        self.leaving = False  # saved and on the way out with code 42

    # --------------------------------------------------------------------------- the training loop's side
    def training(self, save_fn: Callable[[], object]) -> "_Training":
        """A context in which SIGTERM saves through ``save_fn`` at the next ``step_done()`` and exits 42."""
        return _Training(self, save_fn)

    def _start(self, save_fn: Callable[[], object]) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False  # signal handlers can only be set from the main thread
        try:
            self._ensure_handler()
        except Exception as error:  # no coordination service, unsupported platform...: train without it
            first_line = str(error).splitlines()[0] if str(error) else ""
            _log(f"saving on SIGTERM is off: {type(error).__name__}: {first_line}")
            return False
        with self._lock:
            self._save_fn = save_fn
            self._active = True
            self._last_step_at = time.monotonic()
        self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm_in_main_thread)
        self._previous_int_handler = signal.signal(signal.SIGINT, self._on_sigint_in_main_thread)
        self._install_wakeup()
        return True

    def _stop(self) -> None:
        with self._lock:
            self._active = False
            self._save_fn = None
            terminating = self._term_at is not None
            stopped = self._asked_by == signal.SIGINT
        if threading.current_thread() is threading.main_thread():
            self._remove_wakeup()
            signal.signal(signal.SIGTERM, self._previous_handler or signal.SIG_DFL)
            signal.signal(signal.SIGINT, self._previous_int_handler or signal.default_int_handler)
            if stopped:  # a stop, and the loop ended before the save step: leave as any stopped worker does
                _log("stopped; training ended before the checkpoint step: leaving")
                stop_signal.note_stop()
                raise KeyboardInterrupt
        if terminating:  # asked to leave and the loop ended before the save step: leave now
            _log("SIGTERM received; training ended before the checkpoint step: leaving")
            _die_by_sigterm()

    def step_done(self) -> None:
        """Call after every training step, on every worker (they must call it equally often)."""
        now = time.monotonic()
        self._steps += 1
        self._step_time += (now - self._last_step_at - self._step_time) / min(self._steps, 20)
        self._last_step_at = now
        if self._handler is not None and self._active:
            preemption_handler.save_if_preempted(self._handler)

    # --------------------------------------------------------------------------- TensorFlow's handler
    def _ensure_handler(self) -> None:
        if self._handler is not None:
            return
        import tensorflow as tf

        resolver = None
        if task().in_cluster:
            if not worker_facts.coordination_service_available():
                raise RuntimeError(
                    "TensorFlow's coordination service is not running (no MultiWorkerMirroredStrategy yet)")
            resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        # PCH never restores or saves for us: an empty checkpoint in a directory nobody writes to.
        # (under this user's private runtime directory: another user cannot plant a checkpoint there)
        scratch = os.path.join(runtime_dir("nbworkers-pch"), f"{os.getpid()}-never-written")
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(), directory=scratch, max_to_keep=1)
        config = tf.distribute.experimental.TerminationConfig(
            exit_fn=self._exit_after_save, save_fn=self._save, grace_period=0,
        )
        previous = signal.getsignal(signal.SIGTERM)
        try:
            self._handler = preemption_handler.create(resolver, manager, config)
            preemption_handler.quiet_watchers_when_peers_leave()
        finally:
            signal.signal(signal.SIGTERM, previous)  # PCH sets its own: ours goes in while training runs

    def _save(self, *args, **kwargs) -> None:
        save_fn = self._save_fn
        if save_fn is None:
            return
        save_fn()
        self.saves += 1

    def _exit_after_save(self) -> None:
        self.leaving = True
        received = ("was stopped" if self._asked_by == signal.SIGINT
                    else "received SIGTERM" if self._term_at is not None else "a peer received SIGTERM")
        _log(f"{received}; every worker saved a checkpoint at the same step; exiting with code "
             f"{PREEMPTION_EXIT_CODE} so the group restarts from it")
        try:
            flush_reports()
        except Exception:
            pass
        raise _PreemptionExit(PREEMPTION_EXIT_CODE)

    # --------------------------------------------------------------------------- the signal
    def _on_sigterm_in_main_thread(self, signum, frame) -> None:
        if self._wakeup_r is None:  # no wakeup fd: this handler is the only one that sees the signal
            self._on_term()

    def _on_sigint_in_main_thread(self, signum, frame) -> None:
        """A stop (the host's SIGINT) saves as SIGTERM does; the process's own interrupt stays one."""
        if stop_signal.take_own_interrupt():
            raise KeyboardInterrupt
        if not self._active:  # (between _stop's flag and its handler reset)
            stop_signal.note_stop()
            raise KeyboardInterrupt
        stop_signal.note_stop(hold_sigterm=False)  # the worker reports "stopped" after its save
        self._on_term(signal.SIGINT)

    def _install_wakeup(self) -> None:
        if self._wakeup_r is not None:
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(read_fd)
            os.close(write_fd)
            return
        if previous != -1:  # someone else (an event loop) owns it: leave it to them, use the plain handler
            signal.set_wakeup_fd(previous)
            os.close(read_fd)
            os.close(write_fd)
            return
        self._wakeup_r, self._wakeup_w = read_fd, write_fd
        self._wakeup_thread = threading.Thread(target=self._watch_wakeup, args=(read_fd,), daemon=True,
                                               name="nbworkers-sigterm")
        self._wakeup_thread.start()

    def _remove_wakeup(self) -> None:
        if self._wakeup_r is None:
            return
        signal.set_wakeup_fd(-1)
        self._wakeup_r = None
        os.close(self._wakeup_w)  # the watcher thread sees end of file and closes read_fd

    def _watch_wakeup(self, read_fd: int) -> None:
        try:
            while True:
                try:
                    data = os.read(read_fd, 64)
                except InterruptedError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                for signum in data:
                    if signum == signal.SIGTERM:  # (SIGINT: its handler, in the main thread)
                        self._on_term()
        finally:
            try:
                os.close(read_fd)
            except OSError:
                pass

    def _on_term(self, signum: int = signal.SIGTERM) -> None:
        """A request to leave: SIGTERM (from any thread), or a stop's SIGINT (main thread)."""
        if self.leaving:  # the checkpoint is saved and the worker is exiting with code 42 anyway
            return
        with self._lock:
            first = self._asked_by is None
            # the host's SIGTERM after its stop's SIGINT is the same stop going on, not a second request
            same_stop = signum == signal.SIGINT or (self._asked_by == signal.SIGINT and self._terms == 0)
            if signum == signal.SIGTERM:
                self._terms += 1
            active = self._active
            if first:
                self._asked_by = signum
                self._term_at = time.monotonic()
        if same_stop and not first:
            return
        if not first or not active:
            _die_by_sigterm()
        asked = "stopped" if signum == signal.SIGINT else "SIGTERM received"
        _log(f"{asked}: saving a checkpoint at the next step before leaving")
        threading.Thread(target=self._announce, daemon=True, name="nbworkers-preemption-notice").start()
        threading.Thread(target=self._watch_deadline, daemon=True, name="nbworkers-preemption-deadline").start()

    def _announce(self) -> None:
        try:
            preemption_handler.tell_peers_of_sigterm(self._handler)  # tells the peers (coordination service)
        except Exception as error:
            _log(f"could not tell the other workers about the SIGTERM ({type(error).__name__}): leaving without a save")
            _die_by_sigterm()

    def _watch_deadline(self) -> None:
        step_wait = max(env_settings.PREEMPTION_WAIT.get(), STEP_TIME_FACTOR * self._step_time)
        cap = env_settings.PREEMPTION_SAVE_TIMEOUT.get()
        term_at = self._term_at if self._term_at is not None else time.monotonic()  # (set before this thread starts)
        while True:
            time.sleep(WATCH_INTERVAL_S)
            if self.leaving:  # saved and exiting with code 42: a slow exit is not a lost peer
                return
            now = time.monotonic()
            since_step = now - max(self._last_step_at, term_at)
            if since_step > step_wait or now - term_at > cap:
                why = (f"no training step finished for {since_step:.1f} s" if since_step > step_wait
                       else f"{cap:g} s passed")
                _log(f"SIGTERM received and {why} (a peer may be gone): leaving without a save")
                _die_by_sigterm()


class _Training:
    def __init__(self, saver: PreemptionSaver, save_fn: Callable[[], object]):
        self.saver = saver
        self.save_fn = save_fn
        self.on = False

    def __enter__(self) -> "_Training":
        self.on = self.saver._start(self.save_fn)
        return self

    def step_done(self) -> None:
        if self.on:
            self.saver.step_done()

    def __exit__(self, kind, error, tb) -> None:
        if self.on:
            self.on = False
            if isinstance(error, _PreemptionExit):
                return  # leaving with code 42: keep the handlers, nothing else should run
            self.saver._stop()


_saver: PreemptionSaver | None = None


def saver() -> PreemptionSaver | None:
    """The process's ``PreemptionSaver``, or None when saving on SIGTERM is off (``NBWORKERS_PREEMPTION``)."""
    global _saver
    if not enabled():
        return None
    if _saver is None:
        _saver = PreemptionSaver()
    return _saver


class _NoTraining:
    on = False

    def __enter__(self) -> "_NoTraining":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def step_done(self) -> None:
        return None


def training(save_fn: Callable[[], object]):
    """``with training(save_fn) as t: ... t.step_done()`` — a no-op context when preemption saving is off."""
    current = saver()
    return current.training(save_fn) if current is not None else _NoTraining()
