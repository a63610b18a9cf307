"""What the widget tells can be trusted, in a real browser (Debian chromium through Playwright): a widget whose kernel restarted says so,
a failed run opens the failed worker's log, the log panel scrolls like a terminal instead of breaking words.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from browser_helpers import (  # noqa: E402
    TESTS_DIR,
    cell_executed,
    chromium_page,
    lab_server,
    open_and_run_two_cells,
    open_notebook,
    run_cell,
    screenshot,
    wait_widget_status,
    write_notebook,
)
from cells import SLEEP, worker_cell  # noqa: E402

pytestmark = pytest.mark.browser
RUN_TIMEOUT_MS = 120_000
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
DETACH_TIMEOUT_MS = 30_000  # restart -> the widget says its kernel is gone

SLEEP_CELL = worker_cell("-n 2 --name {name}", SLEEP)
SETUP = f"""
import sys
sys.path.insert(0, {str(TESTS_DIR)!r})
from browser_helpers import FakeCluster
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab-trust")
    with lab_server(tmp, env_extra={"NBWORKERS_RUN_ROOT": str(tmp / "runs")}) as server:
        server.run_root = tmp / "runs"
        yield server


SEEN_STATUSES = """() => {
  window.__nbwSeen = [];
  const look = () => document.querySelectorAll('.nbw-header .nbw-badge, .nbw-card .nbw-badge')
    .forEach((b) => { if (!window.__nbwSeen.includes(b.textContent)) window.__nbwSeen.push(b.textContent); });
  new MutationObserver(look).observe(document.querySelector('.nbw'), { subtree: true, childList: true, characterData: true });
  look();
}"""


def _status(page) -> str:
    return page.evaluate("() => document.querySelector('.nbw').dataset.status")


def test_kernel_restart_detaches_the_widget_and_stop_does_not_hang(lab):
    write_notebook(lab.root / "restart.ipynb", ["%load_ext nbworkers", SLEEP_CELL.format(name="restarted")])
    with chromium_page() as page:
        open_and_run_two_cells(page, lab, "restart.ipynb")
        wait_widget_status(page, 'running', RUN_TIMEOUT_MS)
        assert page.locator(".nbw").get_attribute("data-kernel-gone") in ("", None)
        page.evaluate(SEEN_STATUSES)  # every status the header and the cards show from now on
        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
        page.wait_for_function("() => document.querySelector('.nbw').dataset.kernelGone === '1'", timeout=DETACH_TIMEOUT_MS)
        header = page.inner_text(".nbw-header")
        assert "kernel restarted" in header, header  # "The kernel restarted", then the run's end: one reason
        assert "%workers attach restarted" in header, header
        # Stop and Restart cannot reach a kernel any more: disabled, never stuck on "Stopping…"
        assert page.locator(".nbw-stop").is_disabled() and page.locator(".nbw-restart").is_disabled()
        page.locator(".nbw-stop").click(force=True)
        page.wait_for_timeout(500)
        assert "Stopping" not in page.inner_text(".nbw-header")
        # what `%workers attach restarted` says, from the server extension: one status, stopped, and what to do
        page.wait_for_function(
            """() => /Stopped because its kernel restarted or died: run the cell again/.test(
                document.querySelector('.nbw-notice').textContent)""", timeout=DETACH_TIMEOUT_MS)
        assert page.inner_text(".nbw-header .nbw-badge") == "stopped"
        # a run started without --detach never reads "detached" (the --detach feature's word): "stopping", then "stopped"
        seen = page.evaluate("() => window.__nbwSeen")
        assert "detached" not in seen and "stopped" in seen, seen
        assert not page.locator(".nbw-detached-mark").is_visible()
        screenshot(page, "widget-detached.png")


def test_failed_run_opens_the_failed_workers_log_and_the_log_does_not_break_words(lab):
    cell = "cluster = FakeCluster(name='fake-fail-tab', epochs=2, steps=10, step_time=0.05, fail_worker=1)\n" \
           "view = cluster.show()\ncluster.start();"
    write_notebook(lab.root / "fail_tab.ipynb", [SETUP, cell])
    with chromium_page() as page:
        open_and_run_two_cells(page, lab, "fail_tab.ipynb")
        wait_widget_status(page, 'failed', RUN_TIMEOUT_MS)
        active = page.get_attribute(".nbw-tab.nbw-tab-active", "data-index")
        assert active == "1", active
        assert "ValueError: synthetic failure" in page.inner_text(".nbw-log")
        assert "exit code 1" in page.inner_text(".nbw-card[data-index='1']")
        style = page.evaluate("() => { const s = getComputedStyle(document.querySelector('.nbw-log'));"
                              " return [s.whiteSpace, s.overflowWrap, s.wordBreak]; }")
        assert style[0] == "pre" and style[1] != "anywhere" and style[2] != "break-all", style


def _outputs_text(page) -> str:
    return page.evaluate("() => [...document.querySelectorAll('.jp-OutputArea-output')].map(n => n.innerText).join('\\n')")


def test_a_saved_finished_run_renders_its_summary_when_opened_elsewhere(lab):
    """Saved through the server (as Notebook 7 or JupyterLab save), opened in a fresh JupyterLab session: the
    finished run shows its summary, not "Error displaying widget: model not found"."""
    cell = "cluster = FakeCluster(name='fake-saved', epochs=1, steps=6, step_time=0.05)\n" \
           "view = cluster.show()\ncluster.start();"
    write_notebook(lab.root / "saved.ipynb", [SETUP, cell])
    with chromium_page() as page:
        open_and_run_two_cells(page, lab, "saved.ipynb")
        wait_widget_status(page, 'finished', RUN_TIMEOUT_MS)
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.content.widgets[1].model.outputs.toJSON()"
            ".some(o => String((o.data || {})['text/html'] || '').includes('nbw-summary'))")
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
        assert page.locator(".jp-OutputArea-output .nbw").count() == 1  # the page that saved keeps its widget
    saved = json.loads((lab.root / "saved.ipynb").read_text())
    data = [o["data"] for o in saved["cells"][1]["outputs"] if "data" in o]
    assert len(data) == 1 and WIDGET_MIME not in data[0], data
    assert "nbw-summary" in "".join(data[0]["text/html"]) and "fake-saved: finished" in "".join(data[0]["text/plain"])

    # elsewhere: a copy opened with a fresh kernel, no widget model anywhere
    (lab.root / "elsewhere.ipynb").write_text(json.dumps(saved))
    # the control: the same output with the widget view kept is what JupyterLab cannot show
    control = json.loads(json.dumps(saved))
    control["cells"][1]["outputs"][0]["data"][WIDGET_MIME] = {"version_major": 2, "version_minor": 0, "model_id": "0" * 32}
    (lab.root / "control.ipynb").write_text(json.dumps(control))
    # trusted, as a notebook its user saved on this machine is (JupyterLab shows widget views of trusted ones only)
    for name in ("elsewhere.ipynb", "control.ipynb"):
        subprocess.run([sys.executable, "-m", "jupyter", "trust", str(lab.root / name)], check=True, capture_output=True)
    with chromium_page() as page:
        open_notebook(page, lab, "control.ipynb")
        page.wait_for_function("() => document.body.innerText.includes('model not found')")
        open_notebook(page, lab, "elsewhere.ipynb")
        page.wait_for_selector(".jp-OutputArea-output .nbw-summary")
        page.wait_for_timeout(1000)
        shown = _outputs_text(page)
        assert "nbworkers cluster fake-saved: finished" in shown and "model not found" not in shown, shown
        screenshot(page, "saved-summary-elsewhere.png", ".jp-OutputArea-output")


def test_a_run_saved_in_notebook_7_shows_its_summary_in_jupyterlab(lab):
    """The issue's own case: run and saved in Notebook 7, opened in JupyterLab with a fresh kernel."""
    pytest.importorskip("notebook", minversion="7", reason="Notebook 7 is not installed (pip install 'notebook>=7')")
    cell = "cluster = FakeCluster(name='fake-nb7', epochs=1, steps=6, step_time=0.05)\n" \
           "view = cluster.show()\ncluster.start();"
    write_notebook(lab.root / "nb7.ipynb", [SETUP, cell])
    with chromium_page() as page:
        page.goto(f"{lab.url}/notebooks/nb7.ipynb?token={lab.token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell")
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'")
        run_cell(page, 0)
        cell_executed(page, 0)
        run_cell(page, 1)
        wait_widget_status(page, 'finished', RUN_TIMEOUT_MS)
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.content.widgets[1].model.outputs.toJSON()"
            ".some(o => String((o.data || {})['text/html'] || '').includes('nbw-summary'))")
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    saved = json.loads((lab.root / "nb7.ipynb").read_text())
    assert all(WIDGET_MIME not in o.get("data", {}) for o in saved["cells"][1]["outputs"]), saved["cells"][1]["outputs"]
    (lab.root / "nb7-in-lab.ipynb").write_text(json.dumps(saved))
    subprocess.run([sys.executable, "-m", "jupyter", "trust", str(lab.root / "nb7-in-lab.ipynb")], check=True,
                   capture_output=True)
    with chromium_page() as page:
        open_notebook(page, lab, "nb7-in-lab.ipynb")
        page.wait_for_selector(".jp-OutputArea-output .nbw-summary")
        page.wait_for_timeout(1000)
        shown = _outputs_text(page)
        assert "nbworkers cluster fake-nb7: finished" in shown and "model not found" not in shown, shown
