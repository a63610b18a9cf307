"""Which run of `make test` a test belongs to (tools/test_suite.sh runs them; README, Development).

`make test` runs ``ray``, the Ray tests (one simulated cluster), alone: a Ray node the tests start again after
killing it must register with its head within Ray's fixed 30 s, which it missed whenever other tests ran beside
(even at a lower CPU priority). Then three lanes at once: most tests wait (for a kernel, a worker's import, a grace
period, a browser), so three lanes keep two cores busier than one, and nothing runs twice. Lane 1: ``processes``
(PROCESS_MODULES: a run's processes across their life, launched, stopped, killed, preempted, hung, restarted).
Lane 2: ``main``, the rest on ``.venv`` (the editable checkout). Lane 3: ``beside``, the browser tests and the
tutorial notebooks, then ``installed``, the tests marked ``installed`` on ``.venv-installed`` (the wheel users get,
installed non-editable). The lanes were balanced on measured times (2026-11-27, `.ci/run` on a fresh clone, 21.1
min in all: set-up ~2, unit 0.3, ray 5.8, then processes 13.0 | main 12.8 | beside 9.6 + installed 3.2).

``pytest --track NAME`` keeps one run's tests (tests/conftest.py deselects the others; with ``installed`` it also
refuses to run where nbworkers is not the venv's installed package); without it pytest runs every test it
collected, so a developer can run any test, a marked one too, on ``.venv``.
"""

from __future__ import annotations

import pytest

TRACKS = ("ray", "processes", "main", "beside", "installed")
# Modules of the `processes` run (~11.5 min): launches by the magic, zygotes, roles, stops, kill -9s, preemption, the
# watchdog and restart policies.
PROCESS_MODULES = frozenset({
    "test_worker_magic.py", "test_zygote.py", "test_roles_cluster.py", "test_worker_stop.py",
    "test_fault_tolerance.py", "test_fault_soak.py", "test_restart_policy.py", "test_detach.py",
})
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
    if item.path.name in PROCESS_MODULES:
        return "processes"
    return "main"


def select(items: list[pytest.Item], track: str) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """``(kept, deselected)`` for ``track`` (one of TRACKS: pytest's option refuses any other name)."""
    kept = [item for item in items if track_of(item) == track]
    return kept, [item for item in items if track_of(item) != track]
