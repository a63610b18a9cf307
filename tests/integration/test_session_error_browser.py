"""A session's error box in a real JupyterLab page (Debian chromium, Playwright): worker 1 raises while worker 0
waits in an all-reduce (real TensorFlow, 2 workers). The box says what failed in the user's words, worker 0's card
reads "aborted: worker 1 failed" (not pybind11's "MISMATCH of original and normalized active exception types"), and
the log opens on the worker that failed.

NBWORKERS_UPDATE_SCREENSHOT=1 copies the picture to docs/session-error.png (tests leave the tree alone).
"""

from __future__ import annotations

import os
import shutil

import pytest
from browser_helpers import REPO, cell_executed, chromium_page, lab_server, open_notebook, run_cell, screenshot, \
    write_notebook
from conftest import kill_leftovers, processes_of_run_root, wait_until
from session_helpers import BUILD, RAISE_ON_ONE

pytestmark = [pytest.mark.browser, pytest.mark.timeout(400)]
RUN_TIMEOUT_MS = 240_000
ERROR_VIEW = "document.querySelectorAll('.nbw')[1]"


def test_one_workers_error_during_an_all_reduce_reads_in_the_users_words(tmp_path):
    run_root = tmp_path / "runs"
    with lab_server(tmp_path / "lab", env_extra={"NBWORKERS_RUN_ROOT": str(run_root), "TF_CPP_MIN_LOG_LEVEL": "2"}) \
            as lab:
        write_notebook(lab.root / "error.ipynb", ["%load_ext nbworkers", BUILD, RAISE_ON_ONE, "%workers stop train"])
        try:
            with chromium_page(viewport=(1280, 1200)) as page:
                open_notebook(page, lab, "error.ipynb")
                for index in range(3):
                    run_cell(page, index)
                    cell_executed(page, index, RUN_TIMEOUT_MS)
                page.wait_for_function(f"() => {ERROR_VIEW} && {ERROR_VIEW}.dataset.status === 'failed'",
                                       timeout=RUN_TIMEOUT_MS)
                page.wait_for_timeout(1000)
                box = page.evaluate(f"() => {ERROR_VIEW}.querySelector('.nbw-error').innerText")
                assert box.startswith("worker 1: ValueError: only worker 1 fails"), box
                assert "worker 0 was interrupted because of it" in box, box
                shown = page.evaluate(f"() => {ERROR_VIEW}.innerText")
                for internal in ("pybind11", "MISMATCH", "UnavailableError"):
                    assert internal not in shown, (internal, shown)
                card = page.evaluate(f"() => {ERROR_VIEW}.querySelector(\".nbw-card[data-index='0']\").innerText")
                assert "aborted: worker 1 failed" in card, card
                active = page.evaluate(f"() => {ERROR_VIEW}.querySelector('.nbw-tab.nbw-tab-active').dataset.index")
                assert active == "1", active  # the log opens on the worker that failed
                shot = screenshot(page, "session-error.png", ".nbw >> nth=1")
                if os.environ.get("NBWORKERS_UPDATE_SCREENSHOT") == "1":
                    shutil.copyfile(shot, REPO / "docs" / "session-error.png")
                run_cell(page, 3)
                cell_executed(page, 3, 60_000)
        finally:
            if not wait_until(lambda: not processes_of_run_root(run_root), 30):
                kill_leftovers(run_root)
