"""How a worker's host stops its worker's process group (procs/kill.py ``stop_steps``, ``interrupt_group``): SIGINT,
SIGTERM after the interrupt grace, SIGKILL at the stop grace, each only while the group is there. Fake clock and
fake signals: no process is started or signalled."""

from __future__ import annotations

import signal

from nbworkers.procs.kill import interrupt_group, stop_steps


class FakeGroup:
    """A process group on a fake clock: gone ``lives`` seconds after the signal in ``dies_on`` (never: None)."""

    def __init__(self, dies_on: signal.Signals | None, lives: float = 0.0):
        self.now = 0.0
        self.dies_on = dies_on
        self.lives = lives
        self.gone_at: float | None = None
        self.sent: list[tuple[float, signal.Signals]] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.001)

    def send(self, pgid: int, sig: int) -> None:
        self.sent.append((round(self.now, 3), signal.Signals(sig)))
        if sig == self.dies_on or sig == signal.SIGKILL:
            self.gone_at = self.now + (self.lives if sig == self.dies_on else 0.0)

    def alive(self, pgid: int) -> bool:
        return self.gone_at is None or self.now < self.gone_at

    def stop(self, grace: float, interrupt_grace: float) -> list[signal.Signals]:
        return interrupt_group(1234, grace, interrupt_grace, clock=self.clock, sleep=self.sleep, send=self.send,
                               alive=self.alive)


def test_the_steps_are_interrupt_then_terminate_then_kill_at_the_stop_grace():
    assert stop_steps(5.0, 1.0) == [(0.0, signal.SIGINT), (1.0, signal.SIGTERM), (5.0, signal.SIGKILL)]
    assert stop_steps(0.5, 1.0) == [(0.0, signal.SIGINT), (0.5, signal.SIGTERM), (0.5, signal.SIGKILL)]
    assert stop_steps(0.0, 1.0) == [(0.0, signal.SIGKILL)]  # no grace: kill at once


def test_a_worker_that_leaves_on_the_interrupt_gets_nothing_else():
    group = FakeGroup(dies_on=signal.SIGINT, lives=0.3)  # its finally blocks take 0.3 s
    assert group.stop(5.0, 1.0) == [signal.SIGINT]
    assert group.sent == [(0.0, signal.SIGINT)] and group.now < 1.0


def test_a_slow_clean_up_past_the_interrupt_grace_still_gets_sigterm_then_leaves():
    group = FakeGroup(dies_on=signal.SIGINT, lives=2.0)  # (the worker ignores SIGTERM once interrupted)
    assert group.stop(5.0, 1.0) == [signal.SIGINT, signal.SIGTERM]
    assert [s for _, s in group.sent] == [signal.SIGINT, signal.SIGTERM] and 2.0 <= group.now < 5.0


def test_a_worker_stuck_in_c_code_ends_on_sigterm_after_the_interrupt_grace():
    group = FakeGroup(dies_on=signal.SIGTERM)
    assert group.stop(5.0, 1.0) == [signal.SIGINT, signal.SIGTERM]
    assert group.sent[1][0] >= 1.0 and group.now < 1.5


def test_a_worker_that_ignores_both_is_killed_at_the_stop_grace():
    group = FakeGroup(dies_on=None)
    assert group.stop(5.0, 1.0) == [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
    assert 5.0 <= group.sent[2][0] < 5.2


def test_a_group_already_gone_is_not_signalled_again():
    group = FakeGroup(dies_on=None)

    def gone(pgid: int, sig: int) -> None:
        raise ProcessLookupError

    assert interrupt_group(1234, 5.0, 1.0, clock=group.clock, sleep=group.sleep, send=gone,
                           alive=group.alive) == []
