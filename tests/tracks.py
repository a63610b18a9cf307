"""Which run of `make test` a test belongs to (tools/test_suite.sh runs them; docs/development.md).

Each test is in one track: ``beside``, the browser tests, the tutorial notebooks and the documentation site's build
(after the tutorials, in their module); ``main``, the rest on ``.venv``
(the editable checkout); ``faults`` (FAULT_MODULES: kill -9s, preemption, the watchdog, restart policies); ``ray``,
the Ray tests (one simulated cluster); ``slurm``, the Slurm tests (one real Slurm on 127.0.0.1,
tests/slurm_cluster.py); ``processes`` (PROCESS_MODULES: launches, zygotes, roles, stops, detached runs); ``distlib`` (DISTLIB_MODULES: real TensorFlow training in the workers); ``installed``, the tests marked
``installed`` on ``.venv-installed`` (the wheel users get, installed non-editable). `make test` runs each track as
one pytest run, or the long ones as two (SPLIT_TRACKS: ``main-1`` and ``main-2``...), and ``unit`` (tests/unit),
taken from one queue by three lanes (tools/test_suite.sh says how: ``ray`` first in lane 0, one lane beside it).

History, for whoever tunes this next. The Ray tests used to run alone, first: a Ray node the tests start (again)
must register with its head within Ray's fixed 30 s and its raylet's agents must start within ~15 s, which they
missed beside other tests; tests/ray_cli.py now starts the nodes patiently and at a higher priority. Measured
(`.ci/run` on fresh clones): 2026-11-27, 21.1 min in all (ray 5.8 alone, then three lanes of 13 min); 2026-11-28,
four lanes with ray among them: 25.5 min, and three tests that depend on timing failed; the official CI of
2026-11-28 02:23 (ray alone 8.2 min, then three lanes of 15 min): 25.5 min. cpu.txt then showed the CPU ~73% busy
while ray ran alone and ~96% in the three lanes: the suite is CPU-bound, so the layout fills the Ray run's idle
share with one lane and splits the long tracks so that the lanes end together (official CI: 23.6 min). Then less
work: the tests of five modules share one kernel and its zygote (tests/shared_kernel.py) and `ray` collects only its
folder: 21.7 min (2026-11-28, a fresh clone).

``pytest --track NAME`` keeps one run's tests (tests/conftest.py deselects the others; with ``installed`` it also
refuses to run where nbworkers is not the venv's installed package); without it pytest runs every test it
collected, so a developer can run any test, a marked one too, on ``.venv``.
"""

from __future__ import annotations

import pytest

TRACKS = ("ray", "slurm", "processes", "faults", "distlib", "main", "beside", "installed")
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
    "test_compat_step_calls.py", "test_jax_framework.py", "test_torch_framework.py",
})
# The runs whose tests all live in their modules: `make test` collects only those files for them (a whole collection
# of tests/integration costs ~10 s of CPU).
MODULE_TRACKS = {"processes": PROCESS_MODULES, "faults": FAULT_MODULES, "distlib": DISTLIB_MODULES}
INTEGRATION_DIR = "tests/integration"
# The Ray tests live in a folder of their own (its conftest holds the one Ray cluster): the `ray` run collects only it,
# and a test marked `ray` elsewhere is refused at collection (by every other run, which collects the rest).
RAY_FOLDER = "ray"
# The Slurm tests likewise (its conftest holds the one test Slurm): every test there is marked `slurm`, and a test marked
# `slurm` elsewhere is refused at collection.
SLURM_FOLDER = "slurm"
TRACK_OPTION = "--track"
# Tracks `make test` runs in two parts, so that the lanes' last runs end together (a lane's runs are whole pytest
# runs): "<track>-1", the track's tests in these modules, and "<track>-2", its tests in every other module. Each part
# holds about half the track's time (2026-11-28, official CI: main 652 s, beside 627 s, faults 519 s of tests).
SPLIT_TRACKS = {
    "main": frozenset({"test_serverext.py", "test_sessions.py", "test_lint.py", "test_trust_headless.py",
                       "test_packaging.py", "test_kernelspec.py", "test_sidebar_packaging.py"}),
    "beside": frozenset({"test_tutorials.py", "test_browser_widget.py", "test_browser_widget_many.py"}),
    "faults": frozenset({"test_fault_tolerance.py"}),
}


def track_of(item: pytest.Item) -> str:
    """The one run a test belongs to: the first rule that matches."""
    marks = {mark.name for mark in item.iter_markers()}
    if "ray" in marks and item.path.parent.name != RAY_FOLDER:
        raise pytest.UsageError(f"{item.nodeid} is marked ray but is not in {INTEGRATION_DIR}/{RAY_FOLDER}/, the only "
                                "folder `make test`'s ray run collects: move it there")
    if ("slurm" in marks) != (item.path.parent.name == SLURM_FOLDER):
        raise pytest.UsageError(f"{item.nodeid}: the Slurm tests are the tests in {INTEGRATION_DIR}/{SLURM_FOLDER}/, "
                                "each marked slurm (pytestmark = pytest.mark.slurm): `make test`'s slurm run collects "
                                "only that folder")
    if "slurm" in marks:
        return "slurm"
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
    if track == "ray":
        return [f"{INTEGRATION_DIR}/{RAY_FOLDER}"]
    if track == "slurm":
        return [f"{INTEGRATION_DIR}/{SLURM_FOLDER}"]
    modules = MODULE_TRACKS.get(track)
    return [f"{INTEGRATION_DIR}/{name}" for name in sorted(modules)] if modules else [INTEGRATION_DIR]


def runs() -> list[str]:
    """Every integration run of `make test`: a track, or each part of a split one (``SPLIT_TRACKS``)."""
    return [name for track in TRACKS for name in ((f"{track}-1", f"{track}-2") if track in SPLIT_TRACKS else (track,))]


def run_args(run: str) -> list[str]:
    """pytest's arguments for one of ``runs()``: what to collect, what to leave out, and the track to keep."""
    track, _, part = run.partition("-")
    if run not in runs():
        raise ValueError(f"no run {run!r} in make test: one of {', '.join(runs())}")
    collected = paths(track)
    if part:
        mine = sorted(f"{INTEGRATION_DIR}/{name}" for name in SPLIT_TRACKS[track])
        if part == "1":
            collected = [path for path in mine if path in collected] if track in MODULE_TRACKS else mine
        elif track in MODULE_TRACKS:
            collected = [path for path in collected if path not in mine]
        else:
            collected = [*collected, *(f"--ignore={path}" for path in mine)]
    return [*collected, f"{TRACK_OPTION}={track}"]


if __name__ == "__main__":  # tools/test_suite.sh: python tests/tracks.py RUN prints pytest's arguments for RUN
    import sys

    print(" ".join(run_args(sys.argv[1])))
