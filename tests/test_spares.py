"""Warm spares (issue 10): a second run of a same-sized TensorFlow cell starts on pre-started interpreters.

Behaviour only (which processes ran the cell, what the logs say, what the results are), never timings:
those are in benchmarks/.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import psutil
import pytest

from cells import CHECKSUM, FIT, KERAS_TRAINING, worker_cell
from conftest import wait_until

from nbworkers.distlib import wire
from nbworkers.magics.backends import spares

WARM_LINE = "--- nbworkers: warm start"
SPARES_READY_TIMEOUT = 120  # seconds for spares to import TensorFlow on a busy 2-core machine

# The Keras tutorial's code on tf_keras; each worker trains on its own data, so equal checksums mean MWMS ran.
TRAIN_CELL = worker_cell("-n 2 --block --name {name} --env TF_USE_LEGACY_KERAS=1", KERAS_TRAINING, FIT, CHECKSUM,
                         'print("CWD", os.getcwd(), "TF_CONFIG" in os.environ, "NBWORKERS_SPARE" in os.environ)\n')

# One light TensorFlow worker: enough to exercise the pool without loading the shared machine.
TF_CELL = """%%worker -n 1 --block --name {name} {flags}
import tensorflow as tf
print("tensorflow", tf.__version__)
"""


def spare_processes(run_root: Path) -> list[psutil.Process]:
    """Live spare hosts and workers (assigned or not) started by the kernel whose run root this is."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get(spares.SPARE_MARKER_ENV) == str(run_root) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def pool_spares(kernel) -> list[dict]:
    return kernel.value("__import__('nbworkers.magics.backends.spares', fromlist=['pool']).pool().describe()")


def wait_for_spares(kernel, count: int, ready: bool = True) -> list[dict]:
    assert wait_until(
        lambda: len([s for s in pool_spares(kernel) if s["ready"] or not ready]) >= count, SPARES_READY_TIMEOUT, 0.5
    ), f"expected {count} spares, have {pool_spares(kernel)}"
    return pool_spares(kernel)


def worker_log(run_root: Path, name: str, index: int = 0) -> str:
    return (run_root / name / f"worker-{index}.log").read_text()


def run_ok(kernel, cell: str) -> None:
    result = kernel.run(cell)
    assert not result.error and result.status == "ok", result.text


@pytest.fixture
def spare_kernel(kernel, run_root):
    """The kernel fixture with spares on (whatever NBWORKERS_SPARES says), plus: no spare may outlive it."""
    run_ok(kernel, "nbworkers.settings().spares = -1; nbworkers.settings().zygote = False")  # spares: zygotes off
    yield kernel
    kernel.shutdown()
    assert wait_until(lambda: not spare_processes(run_root), 15), "spare processes outlived the kernel"


# ------------------------------------------------------------------------------------------- unit


def test_key_ignores_per_run_variables_but_not_the_rest():
    env = {"PATH": "/bin", "TF_USE_LEGACY_KERAS": "1", "TF_CONFIG": "{}", wire.ENV_KEY: "a", wire.ENV_WORKER: "0",
           wire.ENV_CWD: "/x", wire.ENV_RUN_DIR: "/r/a", wire.ENV_CODE: "/r/a/cell.py"}
    other_run = dict(env, TF_CONFIG='{"task": 1}', **{wire.ENV_KEY: "b", wire.ENV_WORKER: "1", wire.ENV_CWD: "/y"})
    assert spares.spare_key("/py", env) == spares.spare_key("/py", other_run)
    assert spares.spare_key("/py", env) != spares.spare_key("/other/py", env)
    assert spares.spare_key("/py", env) != spares.spare_key("/py", dict(env, TF_USE_LEGACY_KERAS="0"))
    assert spares.spare_key("/py", env) != spares.spare_key("/py", dict(env, EXTRA="1"))
    assert "TF_CONFIG" not in spares.base_env(env) and "PATH" in spares.base_env(env)


@pytest.mark.parametrize(
    "code, module, warm",
    [
        ("import tensorflow as tf\n", None, True),
        ("import time\ntime.sleep(1)\n", None, False),  # no TensorFlow: a spare would only cost memory
        ("import main\n", "import tensorflow as tf\n", True),  # the tutorials' %%writefile module
        ("import os\nos.environ['TF_USE_LEGACY_KERAS'] = '1'\nimport tensorflow\n", None, False),
        ("from nbworkers import distlib\ndistlib.use_tf_keras()\nimport tensorflow\n", None, False),
        ("import main\n", "import os\nos.environ.update(A='1')\nimport tensorflow\n", False),
        ("import os, tensorflow as tf\nprint(os.environ['NBWORKERS_WORKER'] == '0')\n", None, True),  # reading is fine
    ],
)
def test_which_cells_may_run_on_spares(tmp_path, code, module, warm):
    (tmp_path / "cell.py").write_text(code)
    if module is not None:
        (tmp_path / "main.py").write_text(module)
    reason = spares.why_not_warm(str(tmp_path / "cell.py"), str(tmp_path))
    assert (reason is None) == warm, reason


# ------------------------------------------------------------------------------------------- end to end


def test_second_run_starts_on_spares_with_the_same_results(spare_kernel, run_root):
    kernel = spare_kernel
    run_ok(kernel, TRAIN_CELL.format(name="cold"))
    waiting = wait_for_spares(kernel, 2)
    spare_pids = {s["worker_pid"] for s in waiting}
    # waiting spares have imported TensorFlow but hold no TF_CONFIG, no server and no port
    for pid in spare_pids:
        worker = psutil.Process(pid)
        assert "tensorflow" in " ".join(m.path for m in worker.memory_maps()), "the spare has not loaded TensorFlow"
        assert "TF_CONFIG" not in worker.environ()
        assert worker.net_connections(kind="inet") == [], "a spare opened a socket before its assignment"
        assert worker.cwd() != str(kernel.notebook_dir)

    run_ok(kernel, TRAIN_CELL.format(name="warm"))
    snap = kernel.value("nbworkers.get_cluster('warm').snapshot()")
    assert snap["status"] == "finished", snap["error"]
    assert {w["pid"] for w in snap["workers"]} == spare_pids, "the warm run did not run on the pre-started spares"
    cold_logs = [worker_log(run_root, "cold", i) for i in range(2)]
    warm_logs = [worker_log(run_root, "warm", i) for i in range(2)]
    assert all(WARM_LINE not in text for text in cold_logs)
    assert all(WARM_LINE in text for text in warm_logs)
    checksums = [re.findall(r"CHECKSUM (\S+)", text) for text in cold_logs + warm_logs]
    assert all(len(c) == 1 for c in checksums), cold_logs + warm_logs
    assert len({c[0] for c in checksums}) == 1, f"warm and cold runs trained differently: {checksums}"
    # the warm worker runs in the notebook's directory, with TF_CONFIG, and without the spare's marker
    for text in warm_logs:
        assert f"CWD {kernel.notebook_dir} True False" in text
    assert kernel.value("'tensorflow' in __import__('sys').modules") is False


def test_another_env_or_python_does_not_get_the_spares(spare_kernel, run_root):
    kernel = spare_kernel
    run_ok(kernel, TF_CELL.format(name="first", flags=""))
    plain_key = wait_for_spares(kernel, 1, ready=False)[0]["key"]
    run_ok(kernel, TF_CELL.format(name="other-env", flags="--env EXTRA_SETTING=1"))
    assert WARM_LINE not in worker_log(run_root, "other-env")
    # the spares follow the last run: the plain environment's spare is dropped for one with EXTRA_SETTING=1
    assert wait_until(lambda: [s["key"] for s in pool_spares(kernel)] not in ([], [plain_key]), 60, 0.5)
    other_python = str(Path(sys.executable).with_name("python3"))
    assert os.path.exists(other_python) and other_python != sys.executable
    env_key = pool_spares(kernel)[0]["key"]
    run_ok(kernel, TF_CELL.format(name="other-python", flags=f"--env EXTRA_SETTING=1 --python {other_python}"))
    assert WARM_LINE not in worker_log(run_root, "other-python")
    assert wait_until(lambda: [s["key"] for s in pool_spares(kernel)] not in ([], [env_key]), 60, 0.5)
    run_ok(kernel, TF_CELL.format(name="same-again", flags=f"--env EXTRA_SETTING=1 --python {other_python}"))
    assert WARM_LINE in worker_log(run_root, "same-again"), "the same interpreter and env should start warm"


def test_spares_can_be_turned_off(spare_kernel, run_root):
    kernel = spare_kernel
    run_ok(kernel, TF_CELL.format(name="on", flags=""))
    wait_for_spares(kernel, 1, ready=False)
    assert spare_processes(run_root)
    run_ok(kernel, "nbworkers.settings().spares = 0")
    assert wait_until(lambda: not pool_spares(kernel), 10, 0.2)
    assert wait_until(lambda: not spare_processes(run_root), 15), "turned-off spares kept running"
    run_ok(kernel, TF_CELL.format(name="off", flags=""))
    assert WARM_LINE not in worker_log(run_root, "off")
    kernel.run("import time; time.sleep(2)")
    assert not pool_spares(kernel) and not spare_processes(run_root), "spares were started while turned off"


def test_spares_die_with_a_killed_kernel(kernel, run_root):
    run_ok(kernel, "nbworkers.settings().spares = -1; nbworkers.settings().zygote = False")
    run_ok(kernel, TF_CELL.format(name="before-kill", flags=""))
    wait_for_spares(kernel, 1, ready=False)
    assert spare_processes(run_root)
    os.kill(kernel.pid, signal.SIGKILL)
    assert wait_until(lambda: not spare_processes(run_root), 15), "spares outlived a kill -9 of their kernel"


def test_a_restart_after_a_crash_starts_on_spares(spare_kernel, run_root):
    """A worker killed by a signal: the group restarts, and spares started at the failure run the restart."""
    cell = """%%worker -n 2 --block --name crashy --max-restarts 1
import os, signal, time
import tensorflow as tf
generation = os.environ["NBWORKERS_GENERATION"]
if generation == "0" and os.environ["NBWORKERS_WORKER"] == "1":
    os.kill(os.getpid(), signal.SIGKILL)
if generation == "0":
    time.sleep(600)
print("GENERATION", generation, tf.__version__)
"""
    run_ok(spare_kernel, cell)
    snap = spare_kernel.value("nbworkers.get_cluster('crashy').snapshot()")
    assert snap["status"] == "finished" and snap["restarts"] == 1, snap["error"]
    for i in range(2):
        text = worker_log(run_root, "crashy", i)
        relaunched = text.rsplit("launch 1,", 1)[-1]
        assert WARM_LINE in relaunched and "GENERATION 1" in relaunched, text[-2000:]
        assert WARM_LINE not in text.rsplit("launch 1,", 1)[0]
