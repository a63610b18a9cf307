"""Shared fixtures: a real IPython kernel driven through jupyter_client, run directories, leftover checks."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import psutil
import pytest
from tracks import TRACK_OPTION, TRACKS, select

from nbworkers.kernel_driver import (  # noqa: F401 (tests import CellResult and wait_until from here)
    CellResult,
    KernelDriver,
    wait_until,
)
from nbworkers.magics.backends.zygotes import ZYGOTE_MODULE
from nbworkers.procs.strays import kill_strays, processes_under
from shared_kernel import FAILED, SharedKernel, shares_kernel

KERNEL_READY_TIMEOUT = 90  # seconds for a fresh kernel to answer
CELL_TIMEOUT = 300  # seconds for one cell (a real 2-worker TensorFlow run on 2 cores)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        TRACK_OPTION, choices=TRACKS, default=None,
        help="run only the tests of one of `make test`'s runs (tests/tracks.py: ray, main, beside, installed); "
             "default: every test collected")


def pytest_sessionstart(session: pytest.Session) -> None:
    """The installed run must test the installed package: nbworkers from this interpreter's site-packages."""
    if session.config.getoption(TRACK_OPTION) != "installed":
        return
    import nbworkers

    module = Path(nbworkers.__file__).resolve()
    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    checkout = Path(__file__).resolve().parent.parent
    on_path = [entry for entry in sys.path if Path(entry or ".").resolve() == checkout]
    if sys.prefix == sys.base_prefix or not module.is_relative_to(purelib):
        raise pytest.UsageError(
            f"{TRACK_OPTION}=installed tests the installed package, but nbworkers was imported from {module}, "
            f"not from this venv's site-packages ({purelib}): run `make test-installed`")
    if on_path:
        raise pytest.UsageError(
            f"{TRACK_OPTION}=installed tests the installed package, but the checkout {checkout} is on sys.path "
            "(`python -m pytest` puts it there, with its folders distlib/, magics/...): run `make test-installed`, "
            "which runs the venv's pytest script")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep only the tests of one run of `make test` when --track names it (tests/tracks.py)."""
    track = config.getoption(TRACK_OPTION)
    if track is None:
        return
    kept, deselected = select(items, track)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


class Kernel(KernelDriver):
    """A real ipykernel subprocess with helpers to run cells and read what they output (nbworkers.kernel_driver)."""

    def __init__(self, cwd: Path, env: dict[str, str], kernel_cmd: list[str] | None = None):
        super().__init__(cwd, env, kernel_cmd=kernel_cmd, ready_timeout=KERNEL_READY_TIMEOUT)


def _is_zygote(proc) -> bool:
    try:
        return any(ZYGOTE_MODULE in part for part in proc.cmdline())
    except Exception:  # gone meanwhile
        return False


def processes_of_run_root(run_root: Path, zygotes: bool = False) -> list:
    """The live processes of the clusters under ``run_root``: hosts and workers (forked ones too); with
    ``zygotes``, also the kernel's idle zygotes (they belong to the kernel, not a run, and go when it exits)."""
    found = processes_under(run_root)
    if zygotes:
        return found
    return [p for p in found if not (_is_zygote(p) and not _is_zygote(_parent(p)))]


def _parent(proc):
    try:
        return proc.parent()
    except Exception:
        return None


def ended(pid: int) -> bool:
    """The process is gone or a zombie. One look, so it cannot race the exit (``pid_exists(p) and Process(p)``
    raises NoSuchProcess when the process goes between the two)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def kill_leftovers(run_root: Path) -> list[int]:
    return kill_strays(run_root)


@pytest.fixture(autouse=True)
def environment_is_left_as_found():
    """Fail a test that leaves os.environ changed: kernels started by later tests inherit it.

    (A leaked TF_USE_LEGACY_KERAS=1 once made every later Keras 3 and TF 2.15 Estimator run use tf_keras.)
    """
    before = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    yield
    after = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    if after != before:
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        for key in changed:
            if key in before:
                os.environ[key] = before[key]
            else:
                os.environ.pop(key, None)
        pytest.fail(f"the test left os.environ changed: {changed}")


def _close_shared_browser() -> None:
    helpers = sys.modules.get("browser_helpers")
    if helpers is not None:
        helpers.close_browser()


@pytest.fixture(scope="module", autouse=True)
def browser_of_the_module():
    """Close the chromium a module's pages shared (tests/browser_helpers.chromium_page), after its last test."""
    yield
    _close_shared_browser()


@pytest.fixture(autouse=True)
def no_browser_for_other_tests(request: pytest.FixtureRequest):
    """Close it before a test not marked ``browser``: while Playwright's sync API is alive the thread's asyncio loop
    reads as running, and nbclient or jupyter_client in the test could not run theirs."""
    if request.node.get_closest_marker("browser") is None:
        _close_shared_browser()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Marks a test whose setup or call failed (tests/shared_kernel.py ends a shared kernel after it)."""
    report = yield
    if report.failed:
        item.stash[FAILED] = True
    return report


@pytest.fixture(scope="module")
def shared_kernel(tmp_path_factory: pytest.TempPathFactory):
    """The kernel a ``share_kernel`` module's tests share (tests/shared_kernel.py), with its run root."""
    shared = SharedKernel(tmp_path_factory.mktemp("shared-kernel"), start_kernel, processes_of_run_root)
    yield shared
    left = shared.end()
    assert left is None, left


@pytest.fixture
def run_root(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    if shares_kernel(request.node):  # the shared kernel's (its runs' files stay for the module's later tests)
        yield request.getfixturevalue("shared_kernel").run_root
        return
    root = tmp_path / "runs"
    root.mkdir()
    yield root
    kill_leftovers(root)


@pytest.fixture
def kernel_env(run_root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["NBWORKERS_RUN_ROOT"] = str(run_root)
    env["TF_CPP_MIN_LOG_LEVEL"] = "1"
    env["NBWORKERS_ZYGOTE_PREWARM"] = "0"  # zygotes on (the default) but started by the first run: CPU is short
    env.pop("TF_CONFIG", None)
    return env


def start_kernel(notebook_dir: Path, env: dict[str, str]) -> Kernel:
    """A real kernel (this interpreter's ipykernel) with nbworkers loaded, cwd in ``notebook_dir``."""
    k = Kernel(notebook_dir, env, kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    k.notebook_dir = notebook_dir
    loaded = k.run("%load_ext nbworkers\nimport nbworkers")
    assert not loaded.error, loaded.error
    return k


@pytest.fixture
def kernel(request: pytest.FixtureRequest, tmp_path: Path, kernel_env: dict[str, str], run_root: Path):
    """A real kernel with nbworkers loaded, cwd in a temp notebook dir: the test's own, or in a ``share_kernel``
    module the one its tests share (tests/shared_kernel.py), given back after the test in a fresh one's state."""
    if shares_kernel(request.node):
        shared = request.getfixturevalue("shared_kernel")
        yield shared.take(kernel_env)
        problem = shared.after_test(request.node.stash.get(FAILED, False))
        assert problem is None, problem
        return
    notebook_dir = tmp_path / "notebook"
    notebook_dir.mkdir()
    k = start_kernel(notebook_dir, kernel_env)
    yield k
    k.shutdown()
    assert wait_until(lambda: not processes_of_run_root(run_root, zygotes=True), 15), \
        f"processes outlived the kernel: {processes_of_run_root(run_root, zygotes=True)}"
