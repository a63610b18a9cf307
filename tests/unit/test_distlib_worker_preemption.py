"""When a worker saves on SIGTERM (distlib/worker/preemption.py): only cluster workers, and it can be turned
off. No TensorFlow, no processes."""

from __future__ import annotations


def test_preemption_saving_is_on_only_for_cluster_workers_and_can_be_turned_off(monkeypatch):
    from nbworkers.distlib.worker import preemption

    tf_config = '{"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 0}}'
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv(preemption.ENV_PREEMPTION, raising=False)
    assert not preemption.enabled() and preemption.saver() is None  # a plain script: SIGTERM kills as usual
    with preemption.training(lambda: None) as guard:
        guard.step_done()  # a no-op without a saver
    monkeypatch.setenv("TF_CONFIG", tf_config)
    assert preemption.enabled()
    monkeypatch.setenv(preemption.ENV_PREEMPTION, "0")
    assert not preemption.enabled()
    monkeypatch.delenv("TF_CONFIG")
    monkeypatch.setenv(preemption.ENV_PREEMPTION, "1")
    assert preemption.enabled()


class _Saver:
    """A PreemptionSaver in a training loop, without TensorFlow: its threads and its SIGTERM death recorded."""

    def __init__(self, monkeypatch):
        from nbworkers.distlib.worker import preemption, stop_signal

        monkeypatch.setattr(stop_signal, "_stop_requested", False)
        self.deaths = 0
        self.saves_started = 0
        monkeypatch.setattr(preemption, "_die_by_sigterm", self._die)
        self.saver = preemption.PreemptionSaver()
        self.saver._active = True
        monkeypatch.setattr(self.saver, "_announce", lambda: None)
        monkeypatch.setattr(self.saver, "_watch_deadline", lambda: None)
        monkeypatch.setattr(preemption, "_log", lambda message: self._logged(message))

    def _die(self) -> None:
        self.deaths += 1

    def _logged(self, message: str) -> None:
        self.saves_started += "saving a checkpoint" in message


def test_a_stops_sigint_saves_and_the_hosts_sigterm_after_it_is_the_same_stop(monkeypatch):
    import signal

    from nbworkers.distlib.worker import stop_signal

    run = _Saver(monkeypatch)
    run.saver._on_sigint_in_main_thread(signal.SIGINT, None)  # the stop: save at the next step, no KeyboardInterrupt
    assert run.saves_started == 1 and run.deaths == 0 and stop_signal.requested()
    run.saver._on_term(signal.SIGTERM)  # the host's SIGTERM after its interrupt grace: the same stop
    run.saver._on_term(signal.SIGINT)
    assert run.saves_started == 1 and run.deaths == 0
    run.saver._on_term(signal.SIGTERM)  # a second SIGTERM: leave at once, as before
    assert run.deaths == 1


def test_a_second_sigterm_still_kills_and_an_own_interrupt_stays_a_keyboard_interrupt(monkeypatch):
    import signal

    import pytest

    from nbworkers.distlib.worker import stop_signal

    run = _Saver(monkeypatch)
    run.saver._on_term(signal.SIGTERM)
    assert run.saves_started == 1 and run.deaths == 0
    run.saver._on_term(signal.SIGTERM)
    assert run.deaths == 1
    monkeypatch.setattr(stop_signal, "_own_interrupts", 0)
    stop_signal.own_interrupt()  # a session's Stop of its cell
    with pytest.raises(KeyboardInterrupt):
        _Saver(monkeypatch).saver._on_sigint_in_main_thread(signal.SIGINT, None)


def test_the_preemption_watchers_unavailable_error_is_one_line_and_every_other_error_prints_as_before(capsys,
                                                                                                   monkeypatch):
    """Worker 0 (the coordination service) left first: TensorFlow's peer watcher thread fails with UnavailableError,
    a normal end of training, said in one line the views hide; anything else goes to the previous hook."""
    import threading

    from nbworkers.distlib.compat import preemption_handler
    from nbworkers.protocol import wire

    printed: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: printed.append(f"{args.thread.name} {args.exc_type.__name__}"))
    preemption_handler.quiet_watchers_when_peers_leave()
    preemption_handler.quiet_watchers_when_peers_leave()  # once only

    class UnavailableError(Exception):  # (TensorFlow's, by name: no TensorFlow in the unit tests)
        pass

    def fail(error: Exception) -> None:
        raise error

    for name, error in (("PeerTerminationWatcher-1", UnavailableError("failed to connect to all addresses\nGRPC...")),
                        ("PeerTerminationWatcher-1", ValueError("a bug")), ("Thread-9", UnavailableError("other"))):
        thread = threading.Thread(target=fail, args=(error,), name=name)
        thread.start()
        thread.join()
    assert printed == ["PeerTerminationWatcher-1 ValueError", "Thread-9 UnavailableError"]
    assert capsys.readouterr().err == (f"{wire.WATCHER_STOPPED_LINE} PeerTerminationWatcher-1: failed to connect to all "
                                       "addresses\n")
