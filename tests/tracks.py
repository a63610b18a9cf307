"""Which run of `make test` a test belongs to (tools/test_suite.sh runs them; README, Development).

`make test` runs the integration tests as a few pytest runs in three lanes at once: most tests wait (for a kernel,
a worker's import, a grace period, a browser), so three lanes keep two cores busier than one, and nothing runs
twice. One lane: ``ray``, the Ray tests (one simulated cluster), then ``faults``, the fault-tolerance modules
(FAULT_MODULES). The second: ``main``, the rest on ``.venv`` (the editable checkout). The third: ``beside``, the
browser tests and the tutorial notebooks, then ``installed``, the tests marked ``installed`` on
``.venv-installed`` (the wheel users get, installed non-editable). The lanes were balanced on measured times
(2026-11-27, a fresh clone, three lanes at once: ray 7.6 min, the fault modules 7.3, main 17.3, beside 10.9,
installed 3.3). Lanes 2 and 3 run below lane 1's CPU priority (tools/test_suite.sh says why).

``pytest --track NAME`` keeps one run's tests (tests/conftest.py deselects the others; with ``installed`` it also
refuses to run where nbworkers is not the venv's installed package); without it pytest runs every test it
collected, so a developer can run any test, a marked one too, on ``.venv``.
"""

from __future__ import annotations

import pytest

TRACKS = ("ray", "faults", "main", "beside", "installed")
# Modules of the `faults` run: kill -9s, preemption, the watchdog and restart policies (~7 min): after the Ray tests.
FAULT_MODULES = frozenset({"test_fault_tolerance.py", "test_fault_soak.py", "test_restart_policy.py"})
TRACK_OPTION = "--track"


def track_of(item: pytest.Item) -> str:
    """The one run a test belongs to: the first rule that matches."""
    marks = {mark.name for mark in item.iter_markers()}
    if "installed" in marks:
        return "installed"
    if "ray" in marks:
        return "ray"
    if "browser" in marks or "slow" in marks:
        return "beside"
    if item.path.name in FAULT_MODULES:
        return "faults"
    return "main"


def select(items: list[pytest.Item], track: str) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """``(kept, deselected)`` for ``track`` (one of TRACKS: pytest's option refuses any other name)."""
    kept = [item for item in items if track_of(item) == track]
    return kept, [item for item in items if track_of(item) != track]
