"""The nbworkers sidebar in a real JupyterLab and a real Notebook 7, in Debian's chromium through Playwright.

JupyterLab: two notebooks, each with its own kernel running a cluster (workers that report a step every 50 ms,
no TensorFlow), both listed in the sidebar with live progress; Stop, Restart, Log, Attach and Remove from the
sidebar (the stopped run's own widget says stopped; Restart runs it again); after a kernel restart stopped a run,
its Restart runs the cell that started it again in the notebook's new kernel. Notebook 7: the sidebar shows in
its left area.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from browser_helpers import (
    REPO,
    RESULTS_DIR,
    SIDEBAR,
    cell_executed,
    chromium_page,
    lab_server,
    open_notebook,
    run_cell,
    wait_kernel_idle,
    wait_sidebar_row,
    write_notebook,
)
from browser_helpers import sidebar_row as row

from nbworkers.protocol.statuses import KERNEL_GONE

pytestmark = [pytest.mark.browser, pytest.mark.installed]  # the sidebar as pip installs it (make test-installed)
RUN_TIMEOUT_MS = 180_000  # kernel start, zygote, two workers up, on 2 shared cores
STOP_TIMEOUT_MS = 60_000  # Stop -> stopped (stop_grace is 5 s)

STEPS_CELL = """%%worker -n 2 --name {name}
import time
from nbworkers.distlib import report
print("stepping", flush=True)  # the sidebar's Log shows what the cell prints (nbworkers' own lines stay in the file)
for step in range(1, 3001):
    report(epoch=(step - 1) // 600 + 1, epochs_total=5, step=(step - 1) % 600 + 1, steps_total=600,
           loss=1.0 / step ** 0.5)
    time.sleep(0.05)
"""
QUICK_CELL = """%%worker -n 1 --name {name} --block
print("quick run done", flush=True)
"""


def wait_row(page, name: str, condition: str, timeout_ms: int = RUN_TIMEOUT_MS) -> None:
    wait_sidebar_row(page, name, condition, timeout_ms)


def start_run(page, notebook: str) -> None:
    """Run the notebook's two cells: %load_ext, then the %%worker cell (it returns at once)."""
    run_cell(page, 0)
    cell_executed(page, 0, RUN_TIMEOUT_MS)
    run_cell(page, 1)
    cell_executed(page, 1, RUN_TIMEOUT_MS)


def open_second(page, notebook: str) -> None:
    page.evaluate("(path) => window.jupyterapp.commands.execute('docmanager:open', {path})", notebook)
    page.wait_for_function("(path) => window.jupyterapp.shell.currentWidget.context.path === path", arg=notebook)
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell")
    wait_kernel_idle(page, RUN_TIMEOUT_MS)


PANEL_JS = "(path) => [...window.jupyterapp.shell.widgets('main')].find(w => w.context && w.context.path === path)"
OUTPUT_HTML_JS = f"""(path) => {{
    const outputs = ({PANEL_JS})(path).content.widgets[1].model.outputs;
    return outputs.length ? String(outputs.get(0).data['text/html'] || '') : '';
}}"""
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATUS_JS = """(path) => {
    const panel = [...window.jupyterapp.shell.widgets('main')].find(w => w.context && w.context.path === path);
    const view = panel && panel.node.querySelector('.nbw');
    return view ? view.dataset.status : null;
}"""


def widget_status_in(page, notebook: str) -> str | None:
    """The run status the nbworkers widget shows inside the notebook ``notebook`` (open, maybe not in front)."""
    return page.evaluate(WIDGET_STATUS_JS, notebook)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab-sidebar")
    with lab_server(tmp, env_extra={"NBWORKERS_RUN_ROOT": str(tmp / "runs")}) as server:
        server.run_root = tmp / "runs"
        yield server


def test_sidebar_lists_both_kernels_runs_live_and_acts_on_them(lab):
    write_notebook(lab.root / "alpha.ipynb", ["%load_ext nbworkers", STEPS_CELL.format(name="alpha")])
    write_notebook(lab.root / "beta.ipynb", ["%load_ext nbworkers", STEPS_CELL.format(name="beta")])
    with chromium_page(viewport=(1400, 900)) as page:
        open_notebook(page, lab, "alpha.ipynb")
        start_run(page, "alpha.ipynb")
        open_second(page, "beta.ipynb")
        start_run(page, "beta.ipynb")

        # the tab titled nbworkers, in the left sidebar
        tab = page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id='nbworkers-sidebar']")
        assert (tab.get_attribute("title") or "").startswith("nbworkers")
        tab.click()
        page.wait_for_selector(SIDEBAR, state="visible")
        assert page.inner_text(f"{SIDEBAR} .nbw-sb-title").strip().lower() == "nbworkers"

        for name, notebook in (("alpha", "alpha.ipynb"), ("beta", "beta.ipynb")):
            wait_row(page, name, "r.dataset.status === 'running' && Number(r.dataset.step) > 0")
            assert notebook in page.inner_text(f"{row(name)} .nbw-sb-where")  # each run's own kernel
            assert "2/2 workers alive" in page.inner_text(f"{row(name)} .nbw-sb-workers")
            # the run's isolation (state.json's), a badge with why as its tooltip, in the row and the widget's header
            mode = json.loads((lab.run_root / name / "state.json").read_text())["isolation"]["mode"]
            assert page.inner_text(f"{row(name)} .nbw-sb-isolation").strip() == mode
            assert "isolated" in (page.get_attribute(f"{row(name)} .nbw-sb-isolation", "title") or "")
            header = page.evaluate(f"(path) => ({PANEL_JS})(path).node.querySelector('.nbw-isolation').textContent",
                                   notebook)
            assert header == f"isolation: {mode}"
        # live: the steps go on without a reload, and the tab's caption shows the running runs' progress
        before = page.get_attribute(row("beta"), "data-progress")
        wait_row(page, "beta", f"r.dataset.progress && r.dataset.progress !== {before!r}", 30_000)
        assert "epoch 1/5 · step " in page.inner_text(f"{row('beta')} .nbw-sb-progress")
        assert 0 < float(page.eval_on_selector(f"{row('alpha')} .nbw-sb-fill", "e => parseFloat(e.style.width)")) < 100
        caption = tab.get_attribute("title") or ""
        assert "alpha" in caption and "beta" in caption, caption
        RESULTS_DIR.mkdir(exist_ok=True)
        shot = RESULTS_DIR / "sidebar-two-runs.png"
        page.screenshot(path=str(shot), clip={"x": 0, "y": 0, "width": 760, "height": 600})
        if os.environ.get("NBWORKERS_UPDATE_SCREENSHOT") == "1":  # the README's picture; tests leave the tree alone
            shutil.copyfile(shot, REPO / "docs" / "sidebar.png")

        # Stop alpha from the sidebar: its row, and its own notebook's widget, say stopped
        page.click(f"{row('alpha')} .nbw-sb-stop")
        wait_row(page, "alpha", "r.dataset.status === 'stopped'", STOP_TIMEOUT_MS)
        page.wait_for_function(f"(path) => ({WIDGET_STATUS_JS})(path) === 'stopped'", arg="alpha.ipynb",
                               timeout=STOP_TIMEOUT_MS)
        assert widget_status_in(page, "beta.ipynb") == "running"
        assert page.inner_text(f"{row('alpha')} .nbw-sb-workers").startswith("0/2")

        # Restart the stopped run: its own kernel runs it again (a run that ended has no supervisor to ask)
        page.click(f"{row('alpha')} .nbw-sb-restart")
        wait_row(page, "alpha", "r.dataset.status === 'running' && Number(r.dataset.step) > 0")
        page.wait_for_function(f"(path) => ({WIDGET_STATUS_JS})(path) === 'running'", arg="alpha.ipynb")
        # its output's fallback is the live view again, so the saved notebook keeps the widget (the pre-save hook
        # drops it under a final summary): a page reload shows the live run, not the old summary
        page.wait_for_function(f"(path) => ({OUTPUT_HTML_JS})(path).includes('nbw-fallback')", arg="alpha.ipynb")
        page.evaluate(f"(path) => ({PANEL_JS})(path).context.save()", "alpha.ipynb")
        saved = json.loads((lab.root / "alpha.ipynb").read_text())["cells"][1]["outputs"]
        assert any(WIDGET_VIEW in output.get("data", {}) for output in saved), saved
        page.click(f"{row('alpha')} .nbw-sb-stop")
        wait_row(page, "alpha", "r.dataset.status === 'stopped'", STOP_TIMEOUT_MS)

        # Restart beta from the sidebar: its supervisor restarts the group and counts it
        page.click(f"{row('beta')} .nbw-sb-restart")
        wait_row(page, "beta", "r.dataset.status === 'running' && r.textContent.includes('1 restart')", RUN_TIMEOUT_MS)

        # Log: a tab with a worker's log; Attach: a `%workers attach` cell run in the current notebook (alpha):
        # beta runs on in its own kernel, so what alpha's kernel shows is a snapshot, and says it will not update
        page.click(f"{row('beta')} .nbw-sb-log")
        page.wait_for_function(
            "() => { const p = document.querySelector('.nbw-sb-logtext'); return p && p.textContent.length > 0; }")
        page.evaluate("(path) => window.jupyterapp.commands.execute('docmanager:open', {path})", "alpha.ipynb")
        page.click(f"{row('beta')} .nbw-sb-attach")
        page.wait_for_function(
            """() => {
                const cells = window.jupyterapp.shell.currentWidget.content.widgets;
                return cells.some(c => c.model.sharedModel.getSource() === '%workers attach beta'
                    && c.model.executionCount && c.node.innerText.includes('it will not update'));
            }""", timeout=RUN_TIMEOUT_MS)

        # Remove the stopped run: its row and its directory go; beta is stopped from the sidebar too
        assert (lab.run_root / "alpha").is_dir()
        page.click(f"{row('alpha')} .nbw-sb-remove")
        page.wait_for_selector(row("alpha"), state="detached", timeout=30_000)
        assert not (lab.run_root / "alpha").exists()
        # Restart beta's kernel: the run stops with it, and its row says so in the words every view uses; its
        # notebook is still open (the kernel keeps its id), so it is not "(gone)"; Restart's tooltip says what to do
        page.evaluate(f"async (path) => {{ await ({PANEL_JS})(path).sessionContext.session.kernel.restart(); }}",
                      "beta.ipynb")
        wait_row(page, "beta", "r.querySelector('.nbw-sb-status').textContent === 'stopped' && "
                 "r.querySelector('.nbw-sb-where').textContent.includes('beta.ipynb (kernel restarted)')", STOP_TIMEOUT_MS)
        assert page.inner_text(f"{row('beta')} .nbw-sb-message").strip() == KERNEL_GONE
        # its Restart offers to run the cell that started it again, in the notebook's new kernel (the run recorded
        # the cell's id); once its workers are gone
        wait_row(page, "beta", "r.textContent.includes('0/2 workers alive') && "
                 "!r.querySelector('.nbw-sb-restart').disabled", STOP_TIMEOUT_MS)
        assert page.inner_text(f"{row('beta')} .nbw-sb-restart").strip() == "Run again"
        assert "again in beta.ipynb" in (page.get_attribute(f"{row('beta')} .nbw-sb-restart", "title") or "")
        page.click(f"{row('beta')} .nbw-sb-restart")
        wait_row(page, "beta", "r.dataset.status === 'running' && Number(r.dataset.step) > 0 && "
                 "r.querySelector('.nbw-sb-where').textContent.startsWith('beta.ipynb ·')")
        page.wait_for_function(f"(path) => ({WIDGET_STATUS_JS})(path) === 'running'", arg="beta.ipynb")
        page.click(f"{row('beta')} .nbw-sb-stop")
        wait_row(page, "beta", "r.dataset.status === 'stopped'", STOP_TIMEOUT_MS)
        assert not page.console_errors or all("nbworkers" not in e for e in page.console_errors), page.console_errors


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nb7-sidebar")
    with lab_server(tmp, env_extra={"NBWORKERS_RUN_ROOT": str(tmp / "runs")}, app="notebook") as server:
        server.run_root = tmp / "runs"
        yield server


def test_sidebar_in_notebook7_left_area(notebook7):
    write_notebook(notebook7.root / "nb7.ipynb", ["%load_ext nbworkers", QUICK_CELL.format(name="quick")])
    with chromium_page() as page:
        page.goto(f"{notebook7.url}/notebooks/nb7.ipynb?token={notebook7.token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell")
        wait_kernel_idle(page, RUN_TIMEOUT_MS)
        start_run(page, "nb7.ipynb")
        page.evaluate("() => window.jupyterapp.commands.execute('nbworkers:open-sidebar')")
        page.wait_for_selector(SIDEBAR, state="visible")
        wait_row(page, "quick", "r.dataset.status === 'finished'")
        assert "nb7.ipynb" in page.inner_text(f"{row('quick')} .nbw-sb-where")
        RESULTS_DIR.mkdir(exist_ok=True)
        page.screenshot(path=str(RESULTS_DIR / "sidebar-notebook7.png"))
        page.click(f"{row('quick')} .nbw-sb-remove")
        page.wait_for_selector(row("quick"), state="detached", timeout=30_000)
        assert not (notebook7.run_root / "quick").exists()
