"""tests/conftest.py's --track (tests/tracks.py): each test in exactly one of `make test`'s runs; `installed` keeps
the tests marked so and refuses to run where nbworkers is not this venv's installed package (the run on
.venv-installed). The real conftest over a small suite (pytester, in this process).
"""

from __future__ import annotations

import re
import sysconfig
from pathlib import Path

import pytest
from tracks import MODULE_TRACKS, SPLIT_TRACKS, TRACKS, paths, run_args, runs

import nbworkers

TESTS_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
INTEGRATION = "tests/integration"
SUITE = """
import pytest

@pytest.mark.installed
@pytest.mark.browser
def test_on_the_wheel():
    pass

def test_on_the_checkout():
    pass

@pytest.mark.browser
def test_in_a_browser():
    pass

@pytest.mark.slow
def test_a_notebook():
    pass
"""
RAY_SUITE = """
import pytest

@pytest.mark.ray
@pytest.mark.slow
def test_on_ray():
    pass
"""
SLURM_SUITE = """
import pytest

pytestmark = pytest.mark.slurm

def test_on_slurm():
    pass
"""
EVERY_TEST = ["test_a_notebook", "test_in_a_browser", "test_on_ray", "test_on_slurm", "test_on_the_checkout",
              "test_on_the_wheel"]


@pytest.fixture
def suite(pytester):
    pytester.makeconftest(TESTS_CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    installed: on the wheel\n    browser: b\n    ray: r\n    slow: s\n"
                     "    slurm: s\n")
    pytester.makepyfile(test_suite=SUITE, **{"ray/test_suite_on_ray": RAY_SUITE,
                                             "slurm/test_suite_on_slurm": SLURM_SUITE})
    return pytester


def passed(recorded) -> list[str]:
    return sorted(r.nodeid.split("::")[1] for r in recorded.getreports("pytest_runtest_logreport")
                  if r.passed and r.when == "call")


@pytest.mark.parametrize("option, runs", [
    ([], EVERY_TEST),
    (["--track=main"], ["test_on_the_checkout"]),
    (["--track=processes"], []),
    (["--track=ray"], ["test_on_ray"]),
    (["--track=slurm"], ["test_on_slurm"]),
    (["--track=beside"], ["test_a_notebook", "test_in_a_browser"]),
])
def test_each_test_is_in_one_run(suite, option, runs):
    recorded = suite.inline_run("-p", "no:cacheprovider", *option)
    assert passed(recorded) == runs
    assert len(recorded.getcalls("pytest_deselected")) == (1 if option else 0)


def test_the_process_fault_and_distlib_modules_have_runs_of_their_own(pytester):
    pytester.makeconftest(TESTS_CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    browser: b\n")
    pytester.makepyfile(test_fault_soak="def test_kills():\n    pass\n",
                        test_zygote="def test_forks():\n    pass\n",
                        test_keras3_fit="def test_fits():\n    pass\n",
                        test_other="import pytest\n\ndef test_plain():\n    pass\n\n"
                                   "@pytest.mark.browser\ndef test_page():\n    pass\n")
    assert passed(pytester.inline_run("-p", "no:cacheprovider", "--track=faults")) == ["test_kills"]
    assert passed(pytester.inline_run("-p", "no:cacheprovider", "--track=processes")) == ["test_forks"]
    assert passed(pytester.inline_run("-p", "no:cacheprovider", "--track=distlib")) == ["test_fits"]
    assert passed(pytester.inline_run("-p", "no:cacheprovider", "--track=main")) == ["test_plain"]


def test_make_test_queues_every_run_once():
    script = (Path(__file__).resolve().parents[2] / "tools" / "test_suite.sh").read_text()
    first = re.findall(r"^  FIRST=\(([^)]*)\)", script, re.M)
    queues = re.findall(r"^  QUEUE=\(([^)]*)\)", script, re.M)
    assert len(first) == len(queues) == 2, "tools/test_suite.sh has no FIRST=(...) and QUEUE=(...) lines"
    for runs_first, queue in zip(first, queues):  # ray first in lane 0, or every run in the queue
        assert sorted(runs_first.split() + queue.split()) == sorted(["unit", *runs()])


def test_the_two_parts_of_a_split_track_hold_its_tests_once(pytester):
    """main-1 and main-2 (and beside's two parts) run the track's tests between them, none twice."""
    pytester.makeconftest(TESTS_CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    browser: b\n")
    integration = pytester.mkdir("tests").joinpath("integration")
    integration.mkdir()
    modules = sorted(SPLIT_TRACKS["main"] | SPLIT_TRACKS["beside"] | {"test_other.py"})
    for name in modules:  # in each: a test of main's and a browser test (beside's)
        stem = name[len("test_"):-len(".py")]
        integration.joinpath(name).write_text(f"import pytest\n\ndef test_{stem}():\n    pass\n\n"
                                              f"@pytest.mark.browser\ndef test_page_{stem}():\n    pass\n")
    ran = {run: passed(pytester.inline_run("-p", "no:cacheprovider", *run_args(run)))
           for run in ("main-1", "main-2", "beside-1", "beside-2")}
    stems = {name: name[len("test_"):-len(".py")] for name in modules}
    assert ran["main-1"] == sorted(f"test_{stems[name]}" for name in SPLIT_TRACKS["main"])
    assert sorted(ran["main-1"] + ran["main-2"]) == sorted(f"test_{stem}" for stem in stems.values())
    assert ran["beside-1"] == sorted(f"test_page_{stems[name]}" for name in SPLIT_TRACKS["beside"])
    assert sorted(ran["beside-1"] + ran["beside-2"]) == sorted(f"test_page_{stem}" for stem in stems.values())


def test_the_runs_cover_every_track_and_say_the_track_to_keep():
    assert [run.partition("-")[0] for run in runs()] == [t for t in TRACKS for _ in (1, 2) if t in SPLIT_TRACKS or _ == 1]
    for run in runs():
        assert run_args(run)[-1] == f"--track={run.partition('-')[0]}"
    assert run_args("faults-1") + run_args("faults-2") == [
        *[f"tests/integration/{m}" for m in sorted(SPLIT_TRACKS["faults"])], "--track=faults",
        *[f"tests/integration/{m}" for m in sorted(MODULE_TRACKS["faults"] - SPLIT_TRACKS["faults"])], "--track=faults"]
    with pytest.raises(ValueError, match="no run 'main-3'"):
        run_args("main-3")


def test_the_ray_run_collects_only_the_ray_folder_and_a_ray_test_elsewhere_is_refused(suite):
    assert paths("ray") == ["tests/integration/ray"]
    assert run_args("ray") == ["tests/integration/ray", "--track=ray"]
    suite.makepyfile(test_stray="import pytest\n\n@pytest.mark.ray\ndef test_astray():\n    pass\n")
    result = suite.runpytest_inprocess("-p", "no:cacheprovider", "--track=main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_stray.py::test_astray is marked ray but is not in tests/integration/ray/*"])


def test_the_slurm_run_collects_only_the_slurm_folder_whose_tests_are_all_marked_slurm(suite):
    assert run_args("slurm") == ["tests/integration/slurm", "--track=slurm"]
    suite.makepyfile(test_stray="import pytest\n\n@pytest.mark.slurm\ndef test_astray():\n    pass\n")
    result = suite.runpytest_inprocess("-p", "no:cacheprovider", "--track=main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_stray.py::test_astray: the Slurm tests are*tests/integration/slurm/*"])
    (suite.path / "test_stray.py").unlink()
    suite.makepyfile(**{"slurm/test_unmarked": "def test_plain():\n    pass\n"})
    result = suite.runpytest_inprocess("-p", "no:cacheprovider", "--track=slurm")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_unmarked.py::test_plain: the Slurm tests are*each marked slurm*"])


def test_an_unknown_track_is_refused(suite):
    result = suite.runpytest_inprocess("-p", "no:cacheprovider", "--track=browsers")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--track*invalid choice*browsers*"])


def test_installed_refuses_a_checkouts_nbworkers(suite):
    if Path(nbworkers.__file__).resolve().is_relative_to(Path(sysconfig.get_paths()["purelib"]).resolve()):
        pytest.skip("nbworkers is installed here, not the checkout's editable install")
    result = suite.runpytest_inprocess("-p", "no:cacheprovider", "--track=installed")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--track=installed tests the installed package, but nbworkers was imported "
                                 "from*not from this venv's site-packages*make test-installed*"])


def test_a_run_of_modules_collects_only_their_files_and_they_exist():
    root = Path(__file__).resolve().parents[2]
    for track, modules in MODULE_TRACKS.items():
        assert paths(track) == sorted(f"tests/integration/{name}" for name in modules)
        assert all((root / path).is_file() for path in paths(track)), f"{track}: a module in tests/tracks.py is gone"
    assert paths("main") == ["tests/integration"]
    assert (root / paths("ray")[0]).is_dir()
    assert (root / paths("slurm")[0]).is_dir()
    for track, modules in SPLIT_TRACKS.items():
        assert all((root / INTEGRATION / name).is_file() for name in modules), f"{track}: a module in SPLIT_TRACKS is gone"
