"""Headless runs can be trusted: a failed run fails the notebook, the saved notebook keeps the workers' output, the
worker's traceback is shown once with the cell's own line numbers, TensorFlow's start-up chatter stays out.

Real kernels (nbclient / `jupyter nbconvert --execute`), real worker processes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
from browser_helpers import write_notebook  # noqa: E402
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

CELL_TIMEOUT = 240  # s per cell
NBCONVERT_TIMEOUT = 400  # s for a whole notebook

# Line 1 is the %%worker line: the raise is on line 7 of the cell as the notebook shows it.
FAILING = """%%worker -n 2 --block --name boom{flags}
import os, time
me = int(os.environ["NBWORKERS_WORKER"])
print(f"hello from worker {{me}}", flush=True)
if me == 1:
    time.sleep(0.3)
    raise ValueError("bad batch from worker one")
time.sleep(600)  # worker 0 would wait in a collective
"""
RAISE_LINE = 7
ECHOING = """%%worker -n 2 --block --name chatty
import os
me = os.environ["NBWORKERS_WORKER"]
for i in range(3):
    print(f"line {i} of worker {me}", flush=True)
"""


def _env(run_root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(NBWORKERS_RUN_ROOT=str(run_root))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # a default run
    return env


def _nbconvert(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--output", "out.ipynb",
         f"--ExecutePreprocessor.timeout={CELL_TIMEOUT}", str(path)],
        env=env, cwd=path.parent, capture_output=True, text=True, timeout=NBCONVERT_TIMEOUT,
    )


def _execute(path: Path, monkeypatch, run_root: Path) -> tuple[nbformat.NotebookNode, Exception | None]:
    """Run the notebook in-process with nbclient; the saved notebook and the error that stopped it, if any."""
    for key, value in _env(run_root).items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    nb = nbformat.read(path, as_version=4)
    error = None
    try:
        NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    except CellExecutionError as raised:
        error = raised
    nbformat.write(nb, path)
    return nbformat.read(path, as_version=4), error


def _shown_text(cell) -> str:
    """Everything a reader of the saved cell sees: streams, displays (text and HTML), the error's traceback."""
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("display_data", "execute_result"):
            parts.append(output.data.get("text/plain", ""))
            parts.append(output.data.get("text/html", ""))
        elif output.output_type == "error":
            parts.append("\n".join(output.traceback))
    return "\n".join(parts)


def test_failed_run_fails_nbconvert_and_no_raise_keeps_it_green(tmp_path):
    (tmp_path / "fail").mkdir()
    failing = write_notebook(tmp_path / "fail" / "nb.ipynb", ["%load_ext nbworkers", FAILING.format(flags="")])
    result = _nbconvert(failing, _env(tmp_path / "runs"))
    assert result.returncode != 0, result.stderr[-3000:]
    assert "RunFailed" in result.stderr and "bad batch from worker one" in result.stderr, result.stderr[-3000:]

    (tmp_path / "ok").mkdir()
    lenient = write_notebook(tmp_path / "ok" / "nb.ipynb", ["%load_ext nbworkers", FAILING.format(flags=" --no-raise"),
                                                           "print('after the failed run')"])
    result = _nbconvert(lenient, _env(tmp_path / "runs"))
    assert result.returncode == 0, result.stderr[-3000:]
    saved = nbformat.read(tmp_path / "ok" / "out.ipynb", as_version=4)
    assert "after the failed run" in _shown_text(saved.cells[2])
    assert "bad batch from worker one" in _shown_text(saved.cells[1])  # shown, once, in the summary


TF_CELL = """%%worker -n 2 --block --name tfrun
import tensorflow as tf
print("sum", int(tf.reduce_sum(tf.constant([1, 2, 3]))), flush=True)
"""


def test_saved_notebook_keeps_printed_lines_no_chatter_and_a_failures_traceback_once(tmp_path, monkeypatch):
    """One notebook, one kernel (its zygote's TensorFlow import is ~7 s of CPU): cells 1-2 run well and keep each
    worker's printed lines without TensorFlow's start-up chatter; cell 3 fails on worker 1 and shows its traceback
    once, with the cell's own line number; "Run All" stops there."""
    path = write_notebook(tmp_path / "nb.ipynb", ["%load_ext nbworkers", ECHOING, TF_CELL, FAILING.format(flags=""),
                                                  "print('not run')"])
    saved, error = _execute(path, monkeypatch, tmp_path / "runs")

    # the runs that went well: each worker's printed lines, TensorFlow's chatter left to the log file
    shown = _shown_text(saved.cells[1])
    for worker in (0, 1):
        for i in range(3):
            assert f"[{worker}] line {i} of worker {worker}" in shown, shown
    streams = [o for o in saved.cells[1].outputs if o.output_type == "stream"]
    assert streams, saved.cells[1].outputs  # plain text: every renderer shows it
    tf_shown = _shown_text(saved.cells[2])
    assert "[0] sum 6" in tf_shown and tf_shown.count("sum 6") == 1, tf_shown  # the same on both: shown once
    for chatter in ("oneDNN", "absl::InitializeLog", "cuda drivers", "cuInit"):
        assert chatter not in tf_shown, tf_shown
    # ... while the log file on disk keeps everything TensorFlow printed
    log = (tmp_path / "runs" / "tfrun" / "worker-0.log").read_text()
    assert "sum 6" in log
    assert not [o for c in saved.cells[1:3] for o in c.outputs if o.output_type == "error"], error

    # the failed run
    assert error is not None and "RunFailed" in str(error)
    cell = saved.cells[3]
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert len(errors) == 1 and errors[0].ename == "RunFailed"
    traceback = "\n".join(errors[0].traceback)
    assert "run 'boom' failed" in traceback and "worker 1" in traceback
    assert re.search(rf'cell\.py", line {RAISE_LINE}, in <module>', traceback), traceback
    assert 'raise ValueError("bad batch from worker one")' in traceback
    # no kernel-side frames of nbworkers or IPython in it
    assert "magic.py" not in traceback and "interactiveshell" not in traceback, traceback
    shown = _shown_text(cell)
    # the traceback once (the short error lines above it name the exception, not its frames)
    assert shown.count("Traceback (most recent call last)") == 1, shown
    assert shown.count('raise ValueError("bad batch from worker one")') == 1, shown
    # the summary still shows, before the error, and the workers' own output is there
    kinds = [o.output_type for o in cell.outputs]
    assert kinds.index("display_data") < kinds.index("error"), kinds
    assert "nbworkers cluster boom: failed" in shown
    assert "[0] hello from worker 0" in shown and "[1] hello from worker 1" in shown
    assert not saved.cells[4].outputs  # "Run All" stopped at the failed cell
