"""A session cell's live widget in a real JupyterLab page (Debian chromium through Playwright): the session
line (session, cell number, state, what runs), ■ on a cell without --block saying how to stop it, the Stop button
interrupting the cell while the session goes on, the notebook's own interrupt (■) stopping a --block cell the same
way, and the next cell running in the same worker processes. Plain-Python workers: no TensorFlow needed here."""

from __future__ import annotations

import pytest
from browser_helpers import (  # noqa: E402
    cell_executed,
    chromium_page,
    lab_server,
    open_and_run_two_cells,
    run_cell,
    screenshot,
    write_notebook,
)
from conftest import processes_of_run_root, wait_until  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

CELLS = [
    "%load_ext nbworkers\nimport nbworkers",
    "%%worker -n 2 --session web\nimport time\ncounted = 0\nfor counted in range(6000):\n    time.sleep(0.1)",
    "%%worker --session web --block\nprint('AFTER STOP', counted > 0)",
    "%%worker --session web --block\nfor counted in range(6000):\n    time.sleep(0.1)",
    "%%worker --session web --block\nprint('AFTER INTERRUPT', counted > 0)",
    "%%worker --session web\nprint('ONE LINE')\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()\n"
    "'the value ' * 2",
    "%%worker --session web\nimport os\nif os.environ['NBWORKERS_WORKER'] == '1':\n    raise ValueError('only worker 1')",
    "%workers stop web",
]
# A session cell is named by its notebook [N] (issue 43): notebook cell i, each run once in order, is [i + 1].
OUTPUT_OF = "(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].node"
SESSION_LINE = "(i) => { const n = document.querySelectorAll('.nbw-session')[i]; return n ? n.textContent : ''; }"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab server for the module's tests (a server start each was ~3 s of CPU): each test opens a notebook
    of its own (page_url resets the workspace) with a session of its own name; their runs share one run root."""
    tmp = tmp_path_factory.mktemp("lab-sessions")
    run_root = tmp / "runs"
    run_root.mkdir()
    with lab_server(tmp / "lab", env_extra={"NBWORKERS_RUN_ROOT": str(run_root)}) as server:
        server.run_root = run_root
        yield server


def test_the_session_line_stop_and_the_next_cell_in_a_real_page(lab):
    run_root = lab.run_root
    write_notebook(lab.root / "session.ipynb", CELLS)
    with chromium_page() as page:
        open_and_run_two_cells(page, lab, "session.ipynb")
        page.wait_for_function(f"() => ({SESSION_LINE})(0).includes('cell [2] · running')", timeout=90_000)
        assert page.evaluate(SESSION_LINE, 0).startswith("session web · cell [2] · running · import time")
        screenshot(page, "session-cell-running.png")
        # ■ while the cell runs without --block (the kernel is idle): one line says how to stop it, under it
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:interrupt-kernel')")
        page.wait_for_function(f"() => ({OUTPUT_OF})(1).innerText.includes('%workers stop web --cell')",
                               timeout=30_000)
        assert "cell [2] · running" in page.evaluate(SESSION_LINE, 0)  # ■ did not stop it
        page.click(".nbw-stop")
        page.wait_for_function(f"() => ({SESSION_LINE})(0).includes('cell [2] · stopped')", timeout=60_000)
        page.wait_for_function("() => document.querySelector('.nbw').dataset.status === 'stopped'",
                               timeout=10_000)  # the header follows the session line within an update
        run_cell(page, 2)
        cell_executed(page, 2, timeout_ms=90_000)
        assert "cell [3] · finished" in page.evaluate(SESSION_LINE, 1)
        output = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[2].node.textContent")
        assert "[0] AFTER STOP True" in output  # same processes, same state
        visible = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[2].node.innerText")
        assert visible.count("AFTER STOP True") == 1, visible  # every worker prints it: shown once, no log panel
        # the notebook's interrupt (■) while a --block cell waits: the cell stops on every worker, state kept
        run_cell(page, 3)
        page.wait_for_function(f"() => ({SESSION_LINE})(2).includes('cell [4] · running')", timeout=60_000)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:interrupt-kernel')")
        cell_executed(page, 3, timeout_ms=30_000)
        page.wait_for_function(f"() => ({SESSION_LINE})(2).includes('cell [4] · stopped')", timeout=30_000)
        stopped = page.evaluate(f"() => ({OUTPUT_OF})(3).innerText")
        # as a notebook's own interrupt ends a cell: KeyboardInterrupt (CellStopped at a training step), one line
        assert "cell [4] stopped by you; the session and its state live on" in stopped, stopped
        assert "Traceback" not in stopped and "session.py" not in stopped, stopped  # a stop, not a crash
        run_cell(page, 4)
        cell_executed(page, 4, timeout_ms=60_000)
        assert "AFTER INTERRUPT True" in page.evaluate(f"() => ({OUTPUT_OF})(4).textContent")
        run_cell(page, 5)  # without --block: the plot and the value come under the cell's widget as they come
        page.wait_for_function(f"(i) => ({OUTPUT_OF})(i).querySelector('img[src^=\"data:image/png\"]')", arg=5,
                               timeout=60_000)
        page.wait_for_function(f"(i) => ({OUTPUT_OF})(i).innerText.includes('the value the value')", arg=5,
                               timeout=30_000)
        screenshot(page, "session-cell-plot.png")
        # its one printed line: a log panel of one line (no metrics, no chart beside it), not a 220px box
        log = f"({OUTPUT_OF})(5).querySelector('.nbw-log')"
        page.wait_for_function(f"() => {log} && {log}.textContent.includes('ONE LINE')", timeout=30_000)
        height = page.evaluate(f"() => {log}.getBoundingClientRect().height")
        assert 0 < height < 60, height
        # one worker's error, no process restarted: a short list that says nothing was lost and what to run,
        # then the traceback once, in a box that does not scroll
        run_cell(page, 6)
        error = f"({OUTPUT_OF})(6).querySelector('.nbw-error')"
        page.wait_for_function(f"() => {error} && {error}.innerText.includes('nothing was lost')", timeout=60_000)
        shown = page.evaluate(f"() => {error}.innerText")
        # named as the notebook shows the cell: its [N] (issue 43)
        prompt = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[6].model.executionCount")
        assert f"- run: cell [{prompt}] again once it is fixed" in shown and shown.count("Traceback") == 1, shown
        assert shown.index("nothing was lost") < shown.index("Traceback"), shown
        assert page.evaluate(f"() => {error}.scrollHeight <= {error}.clientHeight + 1"), shown
        screenshot(page, "session-cell-error.png")
        run_cell(page, 7)
        cell_executed(page, 7)
        assert not [e for e in page.console_errors if "nbw" in e or "anywidget" in e]
    assert wait_until(lambda: not processes_of_run_root(run_root), 30)


RESTART_CELLS = [
    "%load_ext nbworkers\nimport nbworkers",
    "%%worker -n 2 --session again --block\nvalue = 41",
    "%%worker --session again --block\nprint('VALUE', 'value' in globals())",
    "print('RESTARTS', nbworkers.session('again').restarts)\n%workers stop again",
]
CARD_PIDS = "() => [...document.querySelectorAll('.nbw')[0].querySelectorAll('.nbw-card-host')].map(n => n.textContent)"
SMALL_CELL = ("() => { const w = document.querySelectorAll('.nbw')[0]; return {panels: "
              "getComputedStyle(w.querySelector('.nbw-panels')).display, height: w.getBoundingClientRect().height}; }")
BUTTON = "() => { const b = document.querySelector('.nbw-restart'); return [b.textContent, b.title]; }"


def test_restart_of_a_finished_session_cell_asks_first_and_says_what_it_lost(lab):
    """Restart on a finished session cell: the first click only turns the button into its confirm step (which
    lapses), the second restarts (the workers save first); the widget then says what was kept and its cards show the
    new pids; the plain value comes back by itself."""
    run_root = lab.run_root
    write_notebook(lab.root / "restart.ipynb", RESTART_CELLS)
    with chromium_page() as page:
        open_and_run_two_cells(page, lab, "restart.ipynb")
        cell_executed(page, 1, timeout_ms=90_000)
        page.wait_for_function(f"() => ({SESSION_LINE})(0).includes('cell [2] · finished')", timeout=30_000)
        page.wait_for_function(f"() => ({CARD_PIDS})().every(t => t.includes('pid'))", timeout=30_000)
        old_pids = page.evaluate(CARD_PIDS)
        small = page.evaluate(SMALL_CELL)  # `value = 41`: nothing to chart, nothing printed
        assert small["panels"] == "none" and small["height"] < 200, small
        button = page.evaluate(BUTTON)
        assert button[0] == "Restart" and button[1].startswith("Restart the session's processes: the workers "
                                                               "save the state of cell [2] first"), button
        page.click(".nbw-restart")
        assert page.evaluate(BUTTON)[0] == "Confirm restart (state of cell [2] is saved first)"
        screenshot(page, "session-restart-confirm.png")
        page.wait_for_function("() => document.querySelector('.nbw-restart').textContent === 'Restart'",
                               timeout=10_000)  # the confirm step lapsed: nothing was restarted
        assert page.evaluate(CARD_PIDS) == old_pids
        page.click(".nbw-restart")
        page.click(".nbw-restart")
        page.wait_for_function("() => document.querySelector('.nbw-notice').textContent"
                               ".includes('restarted the session: kept: back by themselves')", timeout=90_000)
        new_pids = page.evaluate(CARD_PIDS)
        assert all("pid" in t for t in new_pids) and not set(new_pids) & set(old_pids), (old_pids, new_pids)
        assert page.evaluate(BUTTON)[0] == "Restart"
        run_cell(page, 2)
        cell_executed(page, 2, timeout_ms=90_000)
        output = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[2].node.textContent")
        assert "[0] VALUE True" in output, output  # new processes, the saved value back by itself
        run_cell(page, 3)
        cell_executed(page, 3)
        output = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[3].node.textContent")
        assert "RESTARTS 1" in output, output
        assert not [e for e in page.console_errors if "nbw" in e or "anywidget" in e]
    assert wait_until(lambda: not processes_of_run_root(run_root), 30)


DETACH_CELLS = [
    "%load_ext nbworkers\nimport nbworkers",
    "%%worker -n 2 --session gone\nimport time\ntime.sleep(600)",
    "%%worker --session gone\nprint('queued behind the sleep')",
    "%load_ext nbworkers\n%workers attach gone",
]
CARD_STATUSES = "(i) => [...document.querySelectorAll('.nbw')[i].querySelectorAll('.nbw-card')].map(n => n.dataset.status)"


def test_a_queued_cell_says_queued_and_a_detached_session_widget_hints_a_command_that_works(lab):
    """A cell behind a running one says "queued" (not "starting"); after a kernel restart the session cell's widget
    suggests `%workers attach SESSION` (which then works in the new kernel) and its cards stop saying running."""
    run_root = lab.run_root
    write_notebook(lab.root / "detach.ipynb", DETACH_CELLS)
    with chromium_page() as page:
        open_and_run_two_cells(page, lab, "detach.ipynb")
        page.wait_for_function(f"() => ({SESSION_LINE})(0).includes('cell [2] · running')", timeout=90_000)
        run_cell(page, 2)
        page.wait_for_function(f"() => ({SESSION_LINE})(1).includes('cell [3] · queued')", timeout=30_000)
        assert page.evaluate("() => document.querySelectorAll('.nbw')[1].dataset.status") == "queued"
        assert set(page.evaluate(CARD_STATUSES, 1)) == {"queued"}
        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
        page.wait_for_function("() => document.querySelector('.nbw').dataset.kernelGone === '1'", timeout=30_000)
        header = page.inner_text(".nbw-header")
        assert "%workers attach gone`" in header or "%workers attach gone " in header, header
        assert "running" not in page.evaluate(CARD_STATUSES, 0)  # the cards no longer hear from the workers
        page.wait_for_function(f"() => ({CARD_STATUSES})(0).every(s => ['lost', 'stopped', 'failed'].includes(s))",
                               timeout=60_000)  # then the run's end, as the server sees it
        screenshot(page, "session-detached.png")
        run_cell(page, 3)
        cell_executed(page, 3, timeout_ms=60_000)
        output = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[3].node.innerText")
        assert "nbworkers cluster gone: " in output and "UsageError" not in output, output  # the run, found
    assert wait_until(lambda: not processes_of_run_root(run_root), 30)
