"""A headless nbclient run (a real kernel) keeps the widget's final summary in the saved notebook."""

from __future__ import annotations

import nbformat
from browser_helpers import TESTS_DIR, write_notebook  # noqa: E402
from nbclient import NotebookClient

KERNEL_TIMEOUT = 120  # s per cell
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

SETUP = f"""
import sys
sys.path.insert(0, {str(TESTS_DIR)!r})
from browser_helpers import FakeCluster
"""
# --block: the view is shown, the run is waited for and finished from the main thread, all in one cell.
BLOCKING = """
blocking = FakeCluster(name="blocking", steps=8, step_time=0.02)
view = blocking.show()
blocking.start()
blocking.wait(60)
view.finish(blocking.snapshot())
"""
# %workers wait: shown in one cell, finished from a later one.
LATER_SHOW = """
later = FakeCluster(name="later", steps=8, step_time=0.02, fail_worker=1)
later_view = later.show()
later.start()
"""
LATER_WAIT = """
later.wait(60)
later_view.finish(later.snapshot())
"""


def _widget_output(cell) -> dict:
    outputs = [o for o in cell.outputs if o.get("output_type") == "display_data" and WIDGET_MIME in o.get("data", {})]
    assert len(outputs) == 1, cell.outputs
    return outputs[0]


def test_headless_run_saves_the_final_summary(tmp_path):
    path = write_notebook(tmp_path / "headless.ipynb", [SETUP, BLOCKING, LATER_SHOW, LATER_WAIT])
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=KERNEL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    nbformat.write(nb, path)
    saved = nbformat.read(path, as_version=4)

    blocking = _widget_output(saved.cells[1])
    assert "nbworkers cluster blocking: finished, 2 workers, in" in blocking["data"]["text/plain"]
    assert "worker-1.log" in blocking["data"]["text/plain"]
    assert "nbw-summary" in blocking["data"]["text/html"]

    later = _widget_output(saved.cells[2])  # rewritten from cell 3 through its display id
    assert "nbworkers cluster later: failed" in later["data"]["text/plain"]
    assert "ValueError: synthetic failure" in later["data"]["text/html"]
    assert not saved.cells[3].outputs

    # The widget state saved beside the outputs is the final one too (static widget renderers use it).
    states = saved.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    model = states[blocking["data"][WIDGET_MIME]["model_id"]]["state"]
    assert model["cluster"]["status"] == "finished"
    assert model["logs"][0][-1] == "worker 0 finished"


REAL_BLOCK = """%%worker -n 2 --block --name headless
from nbworkers.distlib import report
for step in range(1, 6):
    report(step=step, epoch=1, steps_total=5, epochs_total=1, loss=1.0 / step, flush=True)
print("bye")
"""
REAL_LATER = """%%worker -n 2 --name later
from nbworkers.distlib import report
report(step=1, epoch=1, steps_total=1, epochs_total=1, loss=0.5, flush=True)
print("later bye")
"""


def test_headless_worker_magic_saves_the_final_summary(tmp_path, monkeypatch):
    """The real %%worker: --block in one cell, and `%workers wait` finishing an earlier cell's view."""
    monkeypatch.setenv("NBWORKERS_RUN_ROOT", str(tmp_path / "runs"))
    cells = ["%load_ext nbworkers", REAL_BLOCK, REAL_LATER, "%workers wait later --timeout 120"]
    path = write_notebook(tmp_path / "real.ipynb", cells)
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=KERNEL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    nbformat.write(nb, path)
    saved = nbformat.read(path, as_version=4)

    block = _widget_output(saved.cells[1])
    text = block["data"]["text/plain"]
    assert "nbworkers cluster headless: finished, 2 workers, in" in text
    assert str(tmp_path / "runs" / "headless") in text and "worker-1.log" in text
    assert "loss=0.2" in text  # the last metrics
    assert "nbw-summary" in block["data"]["text/html"]
    states = saved.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    model = states[block["data"][WIDGET_MIME]["model_id"]]["state"]
    assert model["cluster"]["status"] == "finished"
    assert any("bye" in line for line in model["logs"][0])

    later = _widget_output(saved.cells[2])
    assert "nbworkers cluster later: finished" in later["data"]["text/plain"]
