"""The widget's compact view in a real JupyterLab page (Debian chromium through Playwright): 32 simulated workers.

A ``ManyWorkersRun`` (tests/many_workers.py) drives the real ``ClusterWidgetView`` in a real kernel from its
snapshots, without TensorFlow: a straggler, a diverging worker, a worker that logs a warning, a global ``lr``.
The page must show one row per worker (the straggler first), a heat strip, the chief's curve in a band with the
outliers as lines, tabs only for the chief and the flagged worker with a picker for the others, ``lr`` once, and
the run's progress in the tab title until the run ends (or its output is cleared: the widget goes away), and only
while its notebook is the tab in view. Rows stay put through updates (compact.SteadyRows).
``NBWORKERS_UPDATE_SCREENSHOT=1`` copies the pictures to docs/widget-many.png (the README's) and docs/widget-16.png.
"""

from __future__ import annotations

import os
import shutil

import pytest
from browser_helpers import (
    REPO,
    TESTS_DIR,
    cell_executed,
    chromium_page,
    lab_server,
    open_and_run_two_cells,
    run_cell,
    screenshot,
    wait_widget_status,
    write_notebook,
)

pytestmark = pytest.mark.browser
WORKERS = 32
SETUP = f"""
import sys
sys.path.insert(0, {str(TESTS_DIR)!r})
from many_workers import ManyWorkersRun, STRAGGLER, DIVERGING, WARNING
"""
RUN = f"run = ManyWorkersRun(name='many', workers={WORKERS}, epochs=5, steps=100, step_time=0.3, start_at=0.4)\n" \
      "view = run.show()\nrun.start();"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_server(tmp_path_factory.mktemp("lab")) as server:
        yield server


def test_32_workers_render_the_compact_view(lab):
    from many_workers import DIVERGING, STRAGGLER, WARNING

    again = RUN.replace("run", "run2").replace("'many'", "'again'").replace("workers=32", "workers=16")
    write_notebook(lab.root / "many.ipynb", [SETUP, RUN, "run.stop()", again, "run2.stop()\nrun2.wait(30)"])
    with chromium_page(viewport=(1280, 1100)) as page:
        open_and_run_two_cells(page, lab, "many.ipynb")
        page.wait_for_selector(".nbw[data-compact='1'] .nbw-row")
        page.wait_for_function("() => document.querySelector('.nbw-chart').dataset.band === '1'")
        page.wait_for_function("() => (document.querySelector('.nbw-chart').dataset.outliers || '') !== ''")
        # one row per worker, stragglers first; a heat-strip cell per worker; no cards
        rows = page.eval_on_selector_all(".nbw-row", "rows => rows.map(r => Number(r.dataset.index))")
        assert sorted(rows) == list(range(WORKERS)) and rows[0] == STRAGGLER
        # steady: the others train at slightly different paces, yet after an update no row moved (the straggler
        # first, the others by index: compact.SteadyRows)
        assert rows == [STRAGGLER] + [i for i in range(WORKERS) if i != STRAGGLER]
        facts = page.inner_text(".nbw-overview-facts")
        page.wait_for_function("(f) => document.querySelector('.nbw-overview-facts').innerText !== f", arg=facts)
        assert page.eval_on_selector_all(".nbw-row", "rows => rows.map(r => Number(r.dataset.index))") == rows
        assert page.locator(".nbw-heat-cell").count() == WORKERS and page.locator(".nbw-card").count() == 0
        # the chart: the band, the chief's line, the diverging worker among the outliers
        outliers = page.eval_on_selector(".nbw-chart", "c => c.dataset.outliers").split(",")
        assert str(DIVERGING) in outliers
        assert page.locator(".nbw-legend-item[data-band='1']").count() == 1
        # lr is the same on every worker: shown once, in no row
        assert page.inner_text(".nbw-shared").replace("\n", " ").count("lr") == 1
        assert "lr" not in page.inner_text(".nbw-rows tbody")
        # logs: tabs for the chief and the worker that warned; the picker reaches any other worker
        page.wait_for_function("() => document.querySelectorAll('.nbw-tab').length === 2")
        tabs = page.eval_on_selector_all(".nbw-tab", "t => t.map(x => Number(x.dataset.index))")
        assert tabs == [0, WARNING]
        page.click(f".nbw-tab[data-index='{WARNING}']")
        page.wait_for_function("() => document.querySelector('.nbw-log').textContent.includes('WARNING')")
        picked = 7
        page.select_option(".nbw-log-picker", str(picked))
        page.wait_for_function(f"() => document.querySelector('.nbw-log').textContent.includes('worker {picked} on')")
        assert page.locator(f".nbw-row.nbw-picked[data-index='{picked}']").count() == 1
        # the tab title carries the chief's progress while the run goes on
        page.wait_for_function("() => /^\\[ep \\d\\/5 · \\d+%\\] ./.test(document.title)")
        title = page.title()
        # another tab in front (JupyterLab's launcher): the title leaves this notebook's run out; back, it returns
        page.evaluate("() => window.jupyterapp.commands.execute('launcher:create')")
        page.wait_for_function("() => !document.title.startsWith('[')")
        page.evaluate("() => window.jupyterapp.commands.execute('application:close')")
        page.wait_for_function("() => /^\\[ep \\d\\/5 · \\d+%\\] ./.test(document.title)")
        page.click(f".nbw-heat-cell[data-index='{DIVERGING}']")
        page.wait_for_function("(i) => document.querySelector('.nbw-log').textContent.includes(`worker ${i} on`)",
                               arg=DIVERGING)
        page.click(".nbw-tab[data-index='0']")
        page.wait_for_timeout(600)
        path = screenshot(page, "widget-many.png")
        if os.environ.get("NBWORKERS_UPDATE_SCREENSHOT"):
            shutil.copy(path, REPO / "docs" / "widget-many.png")
        run_cell(page, 2)  # run.stop()
        wait_widget_status(page, "stopped", 60_000)
        # the run ended: the title is the page's own again
        page.wait_for_function("() => !document.title.startsWith('[')")
        assert title.endswith("] " + page.title())
        cell_executed(page, 2)
        # a second run puts its progress in the title; clearing the outputs (the widget goes away) takes it off
        run_cell(page, 3)
        page.wait_for_function("() => /^\\[ep \\d\\/5 · \\d+%\\] ./.test(document.title)")
        page.wait_for_function("() => document.querySelectorAll('.nbw')[1].querySelectorAll('.nbw-row').length === 16")
        page.wait_for_timeout(1500)
        sixteen = screenshot(page, "widget-16.png", ".nbw >> nth=1")  # the 16-worker view (docs/widget-16.png)
        if os.environ.get("NBWORKERS_UPDATE_SCREENSHOT"):
            shutil.copy(sixteen, REPO / "docs" / "widget-16.png")
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
        page.wait_for_function("() => !document.querySelector('.nbw') && !document.title.startsWith('[')")
        run_cell(page, 4)
        cell_executed(page, 4)
        assert not [e for e in page.console_errors if "nbw" in e or "anywidget" in e]
