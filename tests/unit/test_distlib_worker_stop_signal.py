"""A worker's side of a stop (distlib/worker/stop_signal.py): the host's SIGINT is a KeyboardInterrupt and a stop,
after which SIGTERM waits for the clean-up; a session's own announced interrupt is not a stop. The handler is
called directly: no signal is sent, and SIGTERM's disposition in this process is put back after each test."""

from __future__ import annotations

import signal

import pytest

from nbworkers.distlib.worker import stop_signal


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.setattr(stop_signal, "_stop_requested", False)
    monkeypatch.setattr(stop_signal, "_own_interrupts", 0)
    term, interrupt = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGTERM, term)
    signal.signal(signal.SIGINT, interrupt)


def test_the_hosts_sigint_is_a_keyboard_interrupt_and_holds_sigterm_for_the_clean_up():
    assert not stop_signal.requested()
    with pytest.raises(KeyboardInterrupt):
        stop_signal.on_sigint(signal.SIGINT, None)
    assert stop_signal.requested()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # the finally blocks get until SIGKILL


def test_an_announced_interrupt_is_the_processs_own_not_a_stop():
    stop_signal.own_interrupt()
    with pytest.raises(KeyboardInterrupt):
        stop_signal.on_sigint(signal.SIGINT, None)
    assert not stop_signal.requested()
    assert signal.getsignal(signal.SIGTERM) != signal.SIG_IGN
    with pytest.raises(KeyboardInterrupt):  # the next one was not announced: a stop
        stop_signal.on_sigint(signal.SIGINT, None)
    assert stop_signal.requested()


def test_a_stop_noted_for_preemption_leaves_sigterm_to_its_handler():
    stop_signal.note_stop(hold_sigterm=False)
    assert stop_signal.requested() and signal.getsignal(signal.SIGTERM) != signal.SIG_IGN


def test_install_makes_sigint_a_stop_even_when_it_was_ignored():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a spawned worker inherits it from its host
    stop_signal.install()
    assert signal.getsignal(signal.SIGINT) is stop_signal.on_sigint


def test_install_unblocks_sigint_and_sigterm_a_launcher_left_blocked():
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # as a Ray actor's thread
    try:
        stop_signal.install()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, set())
        assert signal.SIGINT not in blocked and signal.SIGTERM not in blocked
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def test_reassert_sigterm_keeps_pythons_disposition():
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    stop_signal.reassert_sigterm()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


class UnavailableError(Exception):  # TensorFlow's class is told by its name (the kernel side never imports it)
    pass


def test_errors_a_stop_caused_inside_a_collective_read_as_the_stop_and_others_do_not():
    """A Stop that reached a worker inside a collective op ends it with TensorFlow's error, not a KeyboardInterrupt:
    pybind11's MISMATCH (seen after a plain run's Stop of a Keras fit, TF 2.21) or its peer's "Socket closed". The
    worker then says "stopped" in one line (distlib/worker/bootstrap.py), a real error keeps its traceback."""
    from nbworkers.distlib.worker.bootstrap import came_from_the_stop

    mismatch = RuntimeError("pybind11::error_already_set: MISMATCH of original and normalized active exception "
                            "types: ORIGINAL UnavailableError REPLACED BY KeyboardInterrupt: <EMPTY MESSAGE>")
    assert came_from_the_stop(mismatch)
    assert came_from_the_stop(UnavailableError("Collective ops is aborted by: Socket closed"))
    assert not came_from_the_stop(ValueError("shapes (2,) and (3,) differ"))
    assert not came_from_the_stop(RuntimeError("out of memory"))
