"""tests/conftest.py's --installed-tests: `skip` leaves out the tests marked `installed` (the run on the checkout's
editable install), `only` keeps them alone and refuses to run where nbworkers is not this venv's installed package
(the run on .venv-installed, `make test-installed`). The real conftest over a small suite (pytester, in this process).
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import nbworkers
import pytest

TESTS_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
SUITE = """
import pytest

@pytest.mark.installed
def test_on_the_wheel():
    pass

def test_on_the_checkout():
    pass
"""


@pytest.fixture
def suite(pytester):
    pytester.makeconftest(TESTS_CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    installed: on the wheel\n")
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def passed(recorded) -> list[str]:
    return sorted(r.nodeid.split("::")[1] for r in recorded.getreports("pytest_runtest_logreport")
                  if r.passed and r.when == "call")


@pytest.mark.parametrize("option, runs", [
    ([], ["test_on_the_checkout", "test_on_the_wheel"]),
    (["--installed-tests=skip"], ["test_on_the_checkout"]),
])
def test_skip_leaves_out_the_installed_tests(suite, option, runs):
    recorded = suite.inline_run("-p", "no:cacheprovider", *option)
    assert passed(recorded) == runs
    assert len(recorded.getcalls("pytest_deselected")) == (1 if option else 0)


def test_only_refuses_a_checkouts_nbworkers(suite):
    if Path(nbworkers.__file__).resolve().is_relative_to(Path(sysconfig.get_paths()["purelib"]).resolve()):
        pytest.skip("nbworkers is installed here, not the checkout's editable install")
    result = suite.runpytest_inprocess("-p", "no:cacheprovider", "--installed-tests=only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--installed-tests=only tests the installed package, but nbworkers was imported "
                                 "from*not from this venv's site-packages*make test-installed*"])
