"""A Stop of a Keras fit on JAX (distlib/frameworks/jax_stop.py, stop_signal.deferred): every worker leaves after the
same step, whichever step each noticed its SIGINT at, with a fake key-value store in place of JAX's coordination
service (lockstep as on CPU: no worker ends step k + 1 before every peer ended step k). Imports no JAX."""

from __future__ import annotations

import signal

import pytest

from nbworkers.distlib.frameworks import jax_stop
from nbworkers.distlib.worker import stop_signal


class FakeStore:
    def __init__(self):
        self.values: dict[str, str] = {}

    def key_value_set(self, key, value):
        assert key not in self.values
        self.values[key] = value

    def key_value_dir_get(self, prefix):
        return [(k, v) for k, v in self.values.items() if k.startswith(prefix)]


@pytest.mark.parametrize("noticed", [(5, 5), (5, 6), (6, 5), (3, 4, 4), (7, 6, 8)])
def test_every_worker_leaves_after_the_same_step(monkeypatch, noticed):
    store = FakeStore()
    monkeypatch.setattr(jax_stop.jax_backends, "store", lambda: store)
    agreements: list[jax_stop.Agreement | None] = [None] * len(noticed)
    left: list[int | None] = [None] * len(noticed)
    for step in range(1, 20):  # lockstep: each worker ends `step`, in turn
        for rank, first in enumerate(noticed):
            if left[rank] is not None:
                continue
            assert all(other is None or other >= step for other in left), "a peer left before this step"
            if agreements[rank] is None and step >= first:
                agreements[rank] = jax_stop.Agreement("nbworkers/stop/1", rank, len(noticed), step)
            agreement = agreements[rank]
            if agreement is not None and agreement.leave_after(step):
                left[rank] = step
    assert len(set(left)) == 1 and left[0] == max(noticed) + 1, left


def test_a_silent_peer_lets_the_worker_leave_where_it_is(monkeypatch, capsys):
    store = FakeStore()
    monkeypatch.setattr(jax_stop.jax_backends, "store", lambda: store)
    monkeypatch.setattr(jax_stop, "AGREE_TIMEOUT_S", 0.0)
    agreement = jax_stop.Agreement("nbworkers/stop/2", 0, 2, 4)
    assert agreement.leave_after(4)
    assert "did not agree on a step to stop at (TimeoutError: 1 of 2 workers answered)" in capsys.readouterr().out


def test_a_sigint_inside_deferred_is_noted_and_raised_at_the_end_or_taken(monkeypatch):
    monkeypatch.setattr(stop_signal, "_stop_requested", False)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # note_stop's SIGTERM hold: not in this process
    with pytest.raises(KeyboardInterrupt):
        with stop_signal.deferred():
            stop_signal.on_sigint(signal.SIGINT, None)  # noted, not raised here
            assert stop_signal.pending() and stop_signal.requested()
    assert not stop_signal.pending()
    with stop_signal.deferred():  # taken inside (the agreed step): nothing more at the end
        stop_signal.on_sigint(signal.SIGINT, None)
        assert stop_signal.take_pending() and not stop_signal.pending()
    with pytest.raises(KeyboardInterrupt):
        stop_signal.on_sigint(signal.SIGINT, None)  # outside: raised at once
