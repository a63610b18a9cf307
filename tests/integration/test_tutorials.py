"""Every tutorial notebook, executed headless top to bottom (nbclient) with mock data, as a reader would run it.

Each notebook runs in a temporary copy of ``tutorials/`` with a real kernel (this venv's ipykernel) whose
environment has ``NBWORKERS_MOCK_DATA=1`` (the one setting that switches the tutorials to
``tfds.testing.mock_data``) and ``NBWORKERS_RUN_ROOT`` in a temporary directory. A notebook fails the test on
any cell error, including its result cell, which asserts that the final loss and accuracy are in range and
that the workers ended in sync. The test also checks that the final summary of every training run is in
the saved output of the cell that started it, and that no worker process is left afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import kill_leftovers, processes_of_run_root, wait_until
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

REPO = Path(__file__).resolve().parents[2]
TUTORIALS = REPO / "tutorials"
TF215_PYTHON = REPO / ".venv-tf215" / "bin" / "python"
NOTEBOOK_TIMEOUT = 900  # seconds for one notebook on 2 shared cores (they take well under a minute alone)
CELL_TIMEOUT = 600  # seconds for one cell (a blocking wait for a training run)
KERNEL_START_TIMEOUT = 120  # seconds for the kernel to start
LEFTOVER_TIMEOUT = 20  # seconds for worker processes to be gone after the kernel shut down
SUMMARY_MARKER = "nbw-summary"  # the final summary's HTML (magics/views/summary.py render_summary_html)
DEMO_TIMEOUT = 900  # seconds for `python -m nbworkers.demo`

NOTEBOOKS = sorted(p.name for p in TUTORIALS.glob("*.ipynb"))


def worker_cells(notebook) -> list:
    return [c for c in notebook.cells if c.cell_type == "code" and c.source.lstrip().startswith("%%worker")]


def html_of(cell) -> str:
    return "\n".join(str(o.get("data", {}).get("text/html", "")) for o in cell.get("outputs", []))


@pytest.mark.slow
@pytest.mark.timeout(NOTEBOOK_TIMEOUT + 120)
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_tutorial_runs_headless_and_its_result_checks(name, tmp_path):
    workdir = tmp_path / "tutorials"
    shutil.copytree(TUTORIALS, workdir, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    run_root = tmp_path / "runs"
    run_root.mkdir()
    env = dict(os.environ)
    env.update({
        "NBWORKERS_MOCK_DATA": "1",
        "NBWORKERS_RUN_ROOT": str(run_root),
        "TF_CPP_MIN_LOG_LEVEL": "1",
        "NBWORKERS_TF215_PYTHON": str(TF215_PYTHON) if TF215_PYTHON.exists() else "",
    })
    env.pop("TF_CONFIG", None)
    notebook = nbformat.read(workdir / name, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT,
        startup_timeout=KERNEL_START_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    # The kernel is this venv's ipykernel (whatever "python3" kernelspec the machine has elsewhere).
    client.km = client.create_kernel_manager()
    client.km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    try:
        client.execute(env=env, cwd=str(workdir))
    except CellExecutionError as error:
        nbformat.write(notebook, tmp_path / f"failed-{name}")
        pytest.fail(f"{name} failed (executed copy: {tmp_path / f'failed-{name}'}):\n{error}")
    finally:
        nbformat.write(notebook, tmp_path / f"executed-{name}")
        assert wait_until(lambda: not processes_of_run_root(run_root), LEFTOVER_TIMEOUT), (
            f"{name}: worker processes outlived the kernel: {kill_leftovers(run_root)}"
        )
    trained = worker_cells(notebook)
    assert trained, f"{name} has no %%worker cell"
    for cell in trained:
        assert SUMMARY_MARKER in html_of(cell), (
            f"{name}: no final summary in the output of the cell\n{cell.source[:200]}\n"
            f"outputs: {[o.get('output_type') for o in cell.outputs]}"
        )


@pytest.mark.slow
@pytest.mark.installed  # the README's first command, on the wheel (make test-installed)
@pytest.mark.timeout(DEMO_TIMEOUT + 60)
def test_demo_trains_prints_progress_and_result_and_leaves_nothing(tmp_path):
    env = dict(os.environ)
    env.pop("NBWORKERS_MOCK_DATA", None)  # the demo sets it itself
    env["TMPDIR"] = str(tmp_path)  # the demo's run root is a temporary directory: here, so we can look for leftovers
    done = subprocess.run([sys.executable, "-m", "nbworkers.demo"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=DEMO_TIMEOUT)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "epoch 3/3 step 4/4" in out and "workers in sync: yes" in out and "nbworkers demo OK" in out, out
    assert "worker 0: loss" in out and "worker 1: loss" in out, out
    assert not kill_leftovers(tmp_path), "the demo left worker processes behind"
