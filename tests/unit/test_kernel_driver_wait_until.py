"""nbworkers.kernel_driver's poll helper (wait_until), used by the tests, the benchmarks and the demo."""

from __future__ import annotations

from nbworkers.kernel_driver import wait_until


def test_wait_until_returns_the_first_true_value_or_the_last_one():
    seen = iter([0, None, "found", "later"])
    assert wait_until(lambda: next(seen), 5, interval=0.001) == "found"
    assert wait_until(lambda: [], 0.05, interval=0.01) == []  # timed out: the predicate's last value
