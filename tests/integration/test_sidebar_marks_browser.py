"""The sidebar's marks in a real JupyterLab (Debian's chromium, Playwright): a `--detach` run and a session in one
notebook. The detached run's row and widget say "detached" and the row names its notebook (not its supervisor's
"kernel pid N (gone)"); the session's name is not cut by a "(session)" suffix; a row's six buttons take one line and
its age does not wrap. After Restart Kernel the detached run goes on, still named by its notebook.

NBWORKERS_UPDATE_SCREENSHOT=1 copies the picture to docs/sidebar-detached-session.png (tests leave the tree alone).
"""

from __future__ import annotations

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
    wait_sidebar_row,
    write_notebook,
)
from browser_helpers import sidebar_row as row
from conftest import kill_leftovers, processes_of_run_root, wait_until

pytestmark = pytest.mark.browser
RUN_TIMEOUT_MS = 180_000
HELD = """%%worker -n 1 --detach --name held
import time
from nbworkers.distlib import report
for step in range(1, 6001):
    report(epoch=1, epochs_total=1, step=step, steps_total=6000, loss=1.0 / step)
    time.sleep(0.1)
"""
SESSION = "%%worker -n 1 --session s --block\nx = 1\nprint('s ready', flush=True)"
BUTTON_TOPS = "(sel) => [...document.querySelectorAll(sel + ' .nbw-sb-button')].filter(b => b.offsetParent)" \
    ".map(b => b.getBoundingClientRect().top)"
CUT_LABELS = "(sel) => [...document.querySelectorAll(sel + ' .nbw-sb-button')].filter(b => b.offsetParent)" \
    ".filter(b => b.scrollWidth > b.clientWidth).map(b => b.textContent)"


def test_a_detached_run_and_a_session_read_as_such_in_the_sidebar_and_the_widget(tmp_path):
    run_root = tmp_path / "runs"
    with lab_server(tmp_path / "lab", env_extra={"NBWORKERS_RUN_ROOT": str(run_root)}) as lab:
        write_notebook(lab.root / "marks.ipynb", ["%load_ext nbworkers", HELD, SESSION])
        try:
            with chromium_page(viewport=(1280, 800)) as page:
                open_notebook(page, lab, "marks.ipynb")
                for index in range(3):
                    run_cell(page, index)
                    cell_executed(page, index, RUN_TIMEOUT_MS)
                page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id='nbworkers-sidebar']").click()
                page.wait_for_selector(SIDEBAR, state="visible")
                wait_sidebar_row(page, "held", "r.dataset.status === 'running' && Number(r.dataset.step) > 0",
                                 RUN_TIMEOUT_MS)
                wait_sidebar_row(page, "s", "true", RUN_TIMEOUT_MS)
                where = page.inner_text(f"{row('held')} .nbw-sb-where")
                assert where.startswith("detached") and "marks.ipynb" in where and "kernel pid" not in where, where
                assert page.inner_text(f"{row('s')} .nbw-sb-name") == "s"  # not "s (ses…"
                assert page.inner_text(f"{row('s')} .nbw-sb-where").startswith("session")
                assert page.locator(f"{row('s')} .nbw-sb-mark-detached").count() == 0
                for name in ("held", "s"):
                    assert len(set(page.evaluate(BUTTON_TOPS, row(name)))) == 1  # one line of buttons
                    assert page.evaluate(CUT_LABELS, row(name)) == []  # at JupyterLab's default sidebar width
                    assert page.eval_on_selector(f"{row(name)} .nbw-sb-age", "e => getComputedStyle(e).whiteSpace") \
                        == "nowrap"
                # the detached run's own widget carries the mark too
                page.wait_for_function("() => [...document.querySelectorAll('.nbw-detached-mark')]"
                                       ".some(m => m.offsetParent !== null)", timeout=RUN_TIMEOUT_MS)
                RESULTS_DIR.mkdir(exist_ok=True)
                shot = RESULTS_DIR / "sidebar-detached-session.png"
                page.screenshot(path=str(shot), clip={"x": 0, "y": 0, "width": 900, "height": 520})
                if os.environ.get("NBWORKERS_UPDATE_SCREENSHOT") == "1":
                    shutil.copyfile(shot, REPO / "docs" / "sidebar-detached-session.png")
                # Restart Kernel: the detached run goes on and its row still names its notebook
                page.evaluate("async () => { await window.jupyterapp.shell.currentWidget.sessionContext.session"
                              ".kernel.restart(); }")
                wait_sidebar_row(page, "s", "r.dataset.status === 'stopped' || r.dataset.status === 'lost'", 60_000)
                step = int(page.get_attribute(row("held"), "data-step") or 0)
                wait_sidebar_row(page, "held", f"r.dataset.status === 'running' && Number(r.dataset.step) > {step}",
                                 60_000)
                where = page.inner_text(f"{row('held')} .nbw-sb-where")
                assert "marks.ipynb" in where and "gone" not in where, where
                page.click(f"{row('held')} .nbw-sb-stop")
                wait_sidebar_row(page, "held", "r.dataset.status === 'stopped'", 60_000)
        finally:  # a --detach run outlives the lab's kernels: one the test did not stop is killed here
            if not wait_until(lambda: not processes_of_run_root(run_root), 10):
                kill_leftovers(run_root)
            assert wait_until(lambda: not processes_of_run_root(run_root, zygotes=True), 60), \
                processes_of_run_root(run_root, zygotes=True)
