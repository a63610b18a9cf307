"""Which run of `make test` a test belongs to (tools/test_suite.sh runs them; README, Development).

`make test` runs ``unit`` (tests/unit), then ``ray`` alone, then the integration runs below from one queue, longest
first, taken by three lanes at once (tools/test_suite.sh; ALONE_FIRST=0 queues unit and ray too): most tests wait (for a kernel, a worker's import, a grace period, a browser), so
several lanes keep two cores busier than one, and a lane that finishes a run takes the next (the lanes stay balanced
whatever the machine's speed; nothing runs twice). The runs: ``beside``, the browser tests and the tutorial
notebooks; ``main``, the rest on ``.venv`` (the editable checkout); ``faults`` (FAULT_MODULES: kill -9s, preemption,
the watchdog, restart policies); ``ray``, the Ray tests (one simulated cluster); ``processes`` (PROCESS_MODULES:
launches, zygotes, roles, stops, detached runs); ``distlib`` (DISTLIB_MODULES: real TensorFlow training in the
workers); last ``installed``, the tests marked ``installed`` on ``.venv-installed`` (the wheel users get, installed
non-editable; made beside the other runs from the start). The Ray tests used to run alone, first: a Ray node the
tests start (again) must register with its head within Ray's fixed 30 s and its raylet's agents must start within
~15 s, which they missed beside other tests; tests/ray_cli.py now starts the nodes patiently and at a higher
priority. Measured before the split (2026-11-27, `.ci/run` on a fresh clone, 21.1 min in all: set-up ~2, unit 0.3,
ray 5.8 alone, then processes 13.0 | main 12.8 | beside 9.6 + installed 3.2). A trial of this layout (2026-11-28, a
fresh clone, `.ci/run`, while other suites loaded the machine to a load of 14-27 on its 2 cores) ran ray beside the
other lanes in 27 min, all 19 passed; on a quiet machine (2026-11-28), four lanes with ray among them took 25.5 min
in all and three tests that depend on timing failed there (a watchdog stack dump, a custom loop's kill -9 point, the
32-worker page), so ray runs alone first again, the other runs in three lanes, as when the official CI passed.

``pytest --track NAME`` keeps one run's tests (tests/conftest.py deselects the others; with ``installed`` it also
refuses to run where nbworkers is not the venv's installed package); without it pytest runs every test it
collected, so a developer can run any test, a marked one too, on ``.venv``.
"""

from __future__ import annotations

import pytest

TRACKS = ("ray", "processes", "faults", "distlib", "main", "beside", "installed")
# Modules of the `processes` run: launches by the magic, zygotes, roles, stops, detached runs.
PROCESS_MODULES = frozenset({
    "test_worker_magic.py", "test_zygote.py", "test_roles_cluster.py", "test_worker_stop.py", "test_detach.py",
})
# Modules of the `faults` run: kill -9s, preemption, the watchdog and restart policies.
FAULT_MODULES = frozenset({"test_fault_tolerance.py", "test_fault_soak.py", "test_restart_policy.py"})
# Modules of the `distlib` run: real TensorFlow training in the workers (Keras fit, custom loops, Estimator, data).
DISTLIB_MODULES = frozenset({
    "test_distlib_custom_loop.py", "test_distlib_data.py", "test_distlib_estimator.py", "test_distlib_keras.py",
    "test_distlib_light_imports.py", "test_distlib_shared_dir.py", "test_keras3_fit.py", "test_compat_keras3_mwms.py",
})
# The runs whose tests all live in their modules: `make test` collects only those files for them (a whole collection
# of tests/integration costs ~10 s of CPU).
MODULE_TRACKS = {"processes": PROCESS_MODULES, "faults": FAULT_MODULES, "distlib": DISTLIB_MODULES}
INTEGRATION_DIR = "tests/integration"
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
    if item.path.name in FAULT_MODULES:
        return "faults"
    if item.path.name in DISTLIB_MODULES:
        return "distlib"
    return "main"


def select(items: list[pytest.Item], track: str) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """``(kept, deselected)`` for ``track`` (one of TRACKS: pytest's option refuses any other name)."""
    kept = [item for item in items if track_of(item) == track]
    return kept, [item for item in items if track_of(item) != track]


def paths(track: str) -> list[str]:
    """What pytest collects for ``track`` (relative to the checkout): its modules' files when all of its tests live in
    them, else the whole integration folder (a marker may put any test in it)."""
    modules = MODULE_TRACKS.get(track)
    return [f"{INTEGRATION_DIR}/{name}" for name in sorted(modules)] if modules else [INTEGRATION_DIR]


if __name__ == "__main__":  # tools/test_suite.sh: python tests/tracks.py NAME prints what to collect for NAME
    import sys

    print(" ".join(paths(sys.argv[1])))
