"""The widget in a real JupyterLab page (Debian chromium through Playwright), over a fake cluster.

The fake cluster (tests/browser_helpers.py) drives the real ``ClusterWidgetView`` from a thread exactly as
the real supervisor does, without TensorFlow, so these tests check the front end alone; the real
``%%worker`` runs are in test_browser_worker.py.
"""

from __future__ import annotations

import pytest
from browser_helpers import (  # noqa: E402
    TESTS_DIR,
    card_statuses,
    cell_executed,
    cell_running,
    chart_lines,
    chart_pixels,
    chart_points,
    chart_segments,
    chromium_page,
    lab_server,
    log_text,
    open_and_run_two_cells,
    run_cell,
    screenshot,
    wait_widget_status,
    widget_status,
    write_notebook,
)

pytestmark = pytest.mark.browser
RUN_TIMEOUT_MS = 90_000
WORKER_COLORS = ("#2563eb", "#dc2626")  # the chart's colours of workers 0 and 1 (COLORS in widget_cards.js)

SETUP = f"""
import sys
sys.path.insert(0, {str(TESTS_DIR)!r})
from browser_helpers import FakeCluster
"""


def fake_cell(**kwargs) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return f"cluster = FakeCluster({args})\nview = cluster.show()\ncluster.start();"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_server(tmp_path_factory.mktemp("lab")) as server:
        yield server


def test_fake_run_goes_from_starting_to_finished(lab):
    write_notebook(lab.root / "fake_run.ipynb", [SETUP, fake_cell(name="fake-run", epochs=3, steps=30, step_time=0.08)])
    with chromium_page() as page:
        open_and_run_two_cells(page, lab, "fake_run.ipynb")
        page.wait_for_selector(".nbw .nbw-card")
        seen = set(card_statuses(page))
        page.wait_for_function("() => [...document.querySelectorAll('.nbw-card')].some(c => c.dataset.status === 'running')")
        seen |= set(card_statuses(page))
        page.wait_for_function("() => Number(document.querySelector('.nbw-chart').dataset.points) > 10")
        screenshot(page, "widget-fake-running.png")
        wait_widget_status(page, 'finished', RUN_TIMEOUT_MS)
        assert card_statuses(page) == ["finished", "finished"]
        assert seen & {"starting", "waiting", "running"}
        assert chart_points(page) > 10 and chart_lines(page) == 2
        assert chart_pixels(page, WORKER_COLORS[0]) > 20 and chart_pixels(page, WORKER_COLORS[1]) > 20
        assert "worker 0 finished" in log_text(page)
        assert page.locator(".nbw-stop").is_disabled()
        # the metric picker switches the chart
        page.select_option(".nbw-metric", "accuracy")
        assert chart_points(page) > 10
        page.select_option(".nbw-scope", "chief")
        assert page.locator(".nbw-legend-item").count() == 1 and chart_lines(page) == 1
        assert chart_pixels(page, WORKER_COLORS[0]) > 20 and chart_pixels(page, WORKER_COLORS[1]) == 0
        # finish() replaced the fallback in the same output with the final summary; the widget still shows
        assert page.locator(".jp-OutputArea-output .nbw").count() == 1
        screenshot(page, "widget-fake-finished.png")
        assert not [e for e in page.console_errors if "nbw" in e or "anywidget" in e]


def test_chart_starts_empty_and_draws_a_restarted_run_as_new_segments(lab):
    cells = [SETUP, "cluster = FakeCluster(name='fake-restart', epochs=50, steps=20, step_time=0.05)\n"
             "cluster.state.elastic = {'min': 2, 'max': 3}  # the header of an elastic run\nview = cluster.show()",
             "cluster.start();"]  # fmt: skip
    write_notebook(lab.root / "fake_restart.ipynb", cells)
    with chromium_page() as page:
        open_and_run_two_cells(page, lab, "fake_restart.ipynb")
        page.wait_for_selector(".nbw .nbw-card")
        assert page.inner_text(".nbw-chart-empty") == "no metrics reported yet" and chart_points(page) == 0
        assert page.inner_text(".nbw-meta").startswith("2 of 3 workers (elastic, min 2)"), page.inner_text(".nbw-meta")
        run_cell(page, 2)
        page.wait_for_function("() => Number(document.querySelector('.nbw-chart').dataset.points) > 10")
        assert chart_segments(page) == 2 and not page.is_visible(".nbw-chart-empty")
        page.click(".nbw-restart")
        # the steps start again from 0: each worker's line goes on as a new segment in its colour
        page.wait_for_function("() => document.querySelector('.nbw-chart').dataset.segments === '4'", timeout=30_000)
        assert chart_lines(page) == 2 and page.locator(".nbw-legend-item").count() == 2
        assert chart_pixels(page, WORKER_COLORS[0]) > 20 and chart_pixels(page, WORKER_COLORS[1]) > 20
        page.wait_for_timeout(1500)  # a few steps into the new segment, for the picture
        screenshot(page, "widget-fake-restarted.png")
        page.click(".nbw-stop")
        wait_widget_status(page, 'stopped', 30_000)


def test_stop_button_works_while_the_kernel_is_busy(lab):
    cells = [SETUP, fake_cell(name="fake-stop", epochs=100, steps=100, step_time=0.1), "import time\ntime.sleep(60)\n'slept'"]
    write_notebook(lab.root / "fake_stop.ipynb", cells)
    with chromium_page() as page:
        open_and_run_two_cells(page, lab, "fake_stop.ipynb")
        wait_widget_status(page, 'running')
        run_cell(page, 2)  # the kernel is busy for a minute from now
        cell_running(page, 2)
        page.click(".nbw-stop")
        wait_widget_status(page, 'stopped', 30_000)
        assert card_statuses(page) == ["stopped", "stopped"]
        state = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[2].model.executionState")
        assert state == "running"  # stopped while the sleep cell still runs
        screenshot(page, "widget-fake-stopped.png")
        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.interrupt()")


def test_reload_mid_run_brings_the_dashboard_back(lab):
    write_notebook(lab.root / "fake_reload.ipynb", [SETUP, fake_cell(name="fake-reload", epochs=20, steps=50, step_time=0.05)])
    with chromium_page() as page:
        open_and_run_two_cells(page, lab, "fake_reload.ipynb")
        cell_executed(page, 1)
        page.wait_for_function("() => Number((document.querySelector('.nbw-chart') || {dataset: {}}).dataset.points) > 5")
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_timeout(500)
        page.reload()
        page.wait_for_selector(".nbw .nbw-card", timeout=RUN_TIMEOUT_MS)
        assert widget_status(page) == "running"
        first = chart_points(page)
        assert first > 5 and log_text(page)
        page.wait_for_function(f"() => Number(document.querySelector('.nbw-chart').dataset.points) > {first}")
        screenshot(page, "widget-fake-reloaded.png")
        page.click(".nbw-stop")
        wait_widget_status(page, 'stopped', 30_000)


def test_log_flood_keeps_the_page_responsive(lab):
    cells = [SETUP, fake_cell(name="fake-flood", epochs=1, steps=40, step_time=0.05, flood_lines=2500)]
    write_notebook(lab.root / "fake_flood.ipynb", cells)  # 2 workers x 40 x 2500 = 200,000 lines
    with chromium_page() as page:
        open_and_run_two_cells(page, lab, "fake_flood.ipynb")
        wait_widget_status(page, 'running')
        # the page answers while the flood is on
        for _ in range(5):
            assert page.evaluate("() => 1 + 1") == 2
            page.wait_for_timeout(200)
        wait_widget_status(page, 'finished', RUN_TIMEOUT_MS)
        text = log_text(page)
        assert "flood line 2499" in text and "worker 0 finished" in text
        assert len(text.splitlines()) <= 300
    assert "IOPub message rate exceeded" not in lab.log()
    assert "IOPub data rate exceeded" not in lab.log()


def test_failed_run_shows_the_error_and_traceback_tail(lab):
    write_notebook(lab.root / "fake_fail.ipynb", [SETUP, fake_cell(name="fake-fail", epochs=2, steps=10, step_time=0.05, fail_worker=1)])
    with chromium_page() as page:
        open_and_run_two_cells(page, lab, "fake_fail.ipynb")
        wait_widget_status(page, 'failed')
        assert card_statuses(page) == ["stopped", "failed"]
        error = page.inner_text(".nbw-error")
        assert "worker 1 exited with code 1" in error and "ValueError: synthetic failure" in error
        assert "exit code 1" in page.inner_text(".nbw-card[data-index='1']")
        screenshot(page, "widget-fake-failed.png")
