"""Helpers for the widget tests: a fake cluster, a real JupyterLab server, a Playwright-driven chromium page.

Importing this module is cheap (no Playwright, no Jupyter): the fake cluster is also imported inside kernels.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parent.parent
TESTS_DIR = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SERVER_START_TIMEOUT = 60.0  # s for JupyterLab to write its runtime file
PAGE_TIMEOUT_MS = 60_000  # Playwright waits (page load, kernel start)
RESULTS_DIR = REPO / "test-results"
SIDEBAR = "#nbworkers-sidebar"  # the nbworkers sidebar's panel in JupyterLab and Notebook 7


# ------------------------------------------------------------------------------------------ fake cluster


class FakeCluster:
    """A stand-in for ``magics.cluster.Cluster``: real ``ClusterState``, synthetic training on a thread.

    It calls its views like the real supervisor does: ``update`` at most every flush interval, ``finish``
    once at the end. ``stop()``/``restart()`` are non-blocking and thread-safe; the calls are recorded.
    """

    def __init__(
        self,
        name: str = "fake",
        workers: int = 2,
        epochs: int = 2,
        steps: int = 20,
        step_time: float = 0.05,
        lines_per_step: int = 1,
        flood_lines: int = 0,
        fail_worker: int | None = None,
        run_dir: str = "/tmp/nbworkers-fake",
        interval: float = 0.25,
    ):
        from nbworkers.magics.run.core.state import ClusterState, WorkerState

        self.name = name
        self.epochs, self.steps, self.step_time = epochs, steps, step_time
        self.lines_per_step, self.flood_lines, self.fail_worker = lines_per_step, flood_lines, fail_worker
        self.interval = interval
        roles = [("chief", 0)] + [("worker", i) for i in range(workers - 1)]
        self.state = ClusterState(
            name=name,
            run_dir=run_dir,
            workers=[
                WorkerState(index=i, role=r, role_index=ri, host="localhost", pid=10_000 + i,
                            log_path=f"{run_dir}/worker-{i}.log")
                for i, (r, ri) in enumerate(roles)
            ],
        )  # fmt: skip
        self.views: list[Any] = []
        self.calls: list[str] = []
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._restart = threading.Event()
        self._thread: threading.Thread | None = None
        self.done = threading.Event()

    # the Cluster surface the views use
    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self.state.snapshot()

    def stop(self) -> None:
        self.calls.append(f"stop:{threading.current_thread().name}@{time.time():.3f}")
        self._stop.set()

    def restart(self) -> None:
        self.calls.append(f"restart:{threading.current_thread().name}@{time.time():.3f}")
        self._restart.set()

    def show(self, view_factory=None):
        from nbworkers.magics.views.widget import ClusterWidgetView

        view = (view_factory or ClusterWidgetView)(self)
        self.views.append(view)
        view.show()
        return view

    def start(self) -> "FakeCluster":
        self._thread = threading.Thread(target=self._run, name="fake-supervisor", daemon=True)
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)

    # the synthetic run
    def _run(self) -> None:
        last_flush = 0.0
        with self._lock:
            self.state.status = "starting"
        self._sleep(0.5)
        with self._lock:
            for w in self.state.workers:
                w.status = "waiting"
                w.log_tail.feed(["starting worker\n", "waiting for peers\n"])
        self._sleep(0.5)
        with self._lock:
            self.state.status = "running"
        generation_start = 0
        outcome = "finished"
        global_step = 0
        total = self.epochs * self.steps
        while global_step < total:
            if self._stop.is_set():
                outcome = "stopped"
                break
            if self._restart.is_set():
                self._restart.clear()
                with self._lock:
                    self.state.restarts += 1
                    self.state.restart_causes.append("restart requested")
                    self.state.status = "restarting"
                    for w in self.state.workers:
                        w.status, w.restarts = "restarting", w.restarts + 1
                self._flush(force=True)
                self._sleep(0.5)
                with self._lock:
                    self.state.status = "running"
                global_step = generation_start
                continue
            epoch, step = divmod(global_step, self.steps)
            with self._lock:
                for w in self.state.workers:
                    loss = 2.0 * math.exp(-global_step / (total / 3)) + 0.05 * w.index + 0.02 * math.sin(global_step)
                    w.status = "running"  # as the supervisor does at a worker's first metrics
                    w.apply_metrics({"epoch": epoch + 1, "epochs_total": self.epochs, "step": step + 1,
                                     "steps_total": self.steps, "metrics": {"loss": loss, "accuracy": 1 - loss / 2.2}},
                                    time.time())  # fmt: skip
                    line = f"\repoch {epoch + 1} step {step + 1}/{self.steps} loss={loss:.4f}\n"
                    bar = f"\r{step + 1}/{self.steps} [{'=' * ((step + 1) * 20 // self.steps):<20}]"
                    w.log_tail.feed([line] * self.lines_per_step + [bar + ("\n" if step + 1 == self.steps else "")])
                    if self.flood_lines:
                        w.log_tail.feed([f"flood line {n}\n" for n in range(self.flood_lines)])
                if self.fail_worker is not None and global_step == total // 2:
                    w = self.state.workers[self.fail_worker]
                    w.log_tail.feed(["Traceback (most recent call last):\n", '  File "cell", line 3\n',
                                     "ValueError: synthetic failure\n"])  # fmt: skip
                    w.status, w.exit_code = "failed", 1
                    self.state.error = f"worker {self.fail_worker} exited with code 1"
                    outcome = "failed"
            if outcome == "failed":
                break
            global_step += 1
            now = time.monotonic()
            if now - last_flush >= self.interval:
                self._flush()
                last_flush = now
            self._sleep(self.step_time)
        with self._lock:
            for w in self.state.workers:
                if w.status not in ("failed",):
                    w.status = outcome if outcome != "failed" else "stopped"
                w.log_tail.feed([f"worker {w.index} {w.status}\n"])
            self.state.status = outcome
            self.state.ended = time.time()
        snapshot = self.snapshot()
        for view in list(self.views):
            view.finish(snapshot)
        self.done.set()

    def _flush(self, force: bool = False) -> None:
        snapshot = self.snapshot()
        for view in list(self.views):
            view.update(snapshot)

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds) if not self._stop.is_set() else None


# -------------------------------------------------------------------------------------- JupyterLab server


class LabServer:
    def __init__(self, proc: subprocess.Popen, url: str, token: str, root: Path, log_path: Path):
        self.proc, self.url, self.token, self.root, self.log_path = proc, url.rstrip("/"), token, root, log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def page_url(self, notebook: str) -> str:
        return f"{self.url}/lab/tree/{notebook}?token={self.token}&reset"


def write_notebook(path: Path, cells: list[str]) -> Path:
    nb = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"cell{i}", "metadata": {}, "outputs": [],
             "source": source}
            for i, source in enumerate(cells)
        ],  # fmt: skip
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb, indent=1))
    return path


@contextlib.contextmanager
def lab_server(tmp: Path, env_extra: dict[str, str] | None = None, app: str = "jupyterlab") -> Iterator[LabServer]:
    """A real JupyterLab (``app="notebook"``: Notebook 7) on a free localhost port with a token, isolated config,
    no news pop-up. Started as ``python -m <app>`` with this interpreter (``jupyter lab`` would run whatever
    interpreter the ``jupyter-lab`` script's first line names)."""
    root, config, runtime, settings_dir = (tmp / d for d in ("root", "config", "runtime", "lab-settings"))
    for d in (root, config, runtime, settings_dir / "@jupyterlab" / "apputils-extension", tmp / "workspaces"):
        d.mkdir(parents=True, exist_ok=True)
    (config / "jupyter_server_config.py").write_text(
        "c.LabApp.news_url = None\nc.LabApp.check_for_updates_class = 'jupyterlab.NeverCheckForUpdate'\n"
        "c.LabApp.expose_app_in_browser = True\n"
        "c.JupyterNotebookApp.expose_app_in_browser = True\n"  # Notebook 7's pages too, when it is installed
    )
    (settings_dir / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    token = os.urandom(16).hex()
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_RUNTIME_DIR": str(runtime),
        "JUPYTERLAB_SETTINGS_DIR": str(settings_dir),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
        "JUPYTER_TOKEN": token,
        "PYTHONPATH": os.pathsep.join([str(TESTS_DIR)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
        **(env_extra or {}),
    }
    log_path = tmp / "server.log"
    log = open(log_path, "wb")
    # `-m jupyterlab`, not `-m jupyter lab`: the latter execs the `jupyter-lab` script, whose shebang may name another
    # interpreter (a copied venv's points at the venv it was copied from), and the kernels run the server's Python
    cmd = [sys.executable, "-m", app, "--no-browser", "--ip=127.0.0.1", "--ServerApp.port=0",
           "--ServerApp.port_retries=50", f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}",
           "--LabApp.extension_manager=readonly"]  # fmt: skip
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        info = None
        while info is None:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"jupyter lab did not start in {SERVER_START_TIMEOUT} s:\n{log_path.read_text()[-3000:]}")
            for f in runtime.glob("jpserver-*.json"):
                with contextlib.suppress(ValueError):
                    data = json.loads(f.read_text())
                    if data.get("pid") == proc.pid:
                        info = data
            time.sleep(0.2)
        yield LabServer(proc, info["url"], token, root, log_path)
    finally:
        kill_group(proc)
        log.close()


def kill_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """TERM the process group, then KILL it after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)


# ------------------------------------------------------------------------------------------ browser


# The chromium of a test module (Playwright and its browser: ~2.4 s of CPU to start), shared by its pages; each page
# is in a browser context of its own (its own cookies, storage and cache). conftest closes it after the module.
_SHARED_BROWSER: dict[str, Any] = {}


def _browser() -> Any:
    browser = _SHARED_BROWSER.get("browser")
    if browser is None or not browser.is_connected():
        close_browser()
        from playwright.sync_api import sync_playwright

        playwright = sync_playwright().start()
        _SHARED_BROWSER["playwright"] = playwright
        _SHARED_BROWSER["browser"] = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                                                headless=True)
    return _SHARED_BROWSER["browser"]


def close_browser() -> None:
    """End the module's chromium and Playwright, if started (conftest, after each module)."""
    browser, playwright = _SHARED_BROWSER.pop("browser", None), _SHARED_BROWSER.pop("playwright", None)
    with contextlib.suppress(Exception):
        if browser is not None:
            browser.close()
    with contextlib.suppress(Exception):
        if playwright is not None:
            playwright.stop()


@contextlib.contextmanager
def chromium_page(viewport: tuple[int, int] = (1280, 1000)) -> Iterator[Any]:
    """A Playwright page in Debian's chromium (Playwright never downloads a browser here), in a fresh browser context
    of the module's chromium."""
    if not Path(CHROMIUM).exists():
        import pytest

        pytest.skip(f"{CHROMIUM} missing: apt-get install -y chromium (or make browser-deps)")
    context = _browser().new_context(viewport={"width": viewport[0], "height": viewport[1]})
    try:
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_MS)
        page.console_errors = []  # type: ignore[attr-defined]
        page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
        yield page
    finally:
        with contextlib.suppress(Exception):  # its browser may have died with the test
            context.close()


def open_notebook(page: Any, server: LabServer, notebook: str) -> None:
    page.goto(server.page_url(notebook))
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    wait_kernel_idle(page)


def open_and_run_two_cells(page: Any, server: LabServer, notebook: str) -> None:
    """Open ``notebook``, run its first cell (the set-up) to the end, then start its second (the run)."""
    open_notebook(page, server, notebook)
    run_cell(page, 0)
    cell_executed(page, 0)
    run_cell(page, 1)


def wait_widget_status(page: Any, status: str, timeout_ms: int | None = None) -> None:
    """Wait until the widget on the page shows the run's ``status`` (Playwright's default timeout if None)."""
    script = f"() => document.querySelector('.nbw') && document.querySelector('.nbw').dataset.status === {status!r}"
    if timeout_ms is None:
        page.wait_for_function(script)
    else:
        page.wait_for_function(script, timeout=timeout_ms)


def wait_kernel_idle(page: Any, timeout_ms: int = PAGE_TIMEOUT_MS) -> None:
    page.wait_for_function(
        """() => {
            const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
            const ctx = w && w.sessionContext;
            return ctx && ctx.session && ctx.session.kernel && ctx.session.kernel.status === 'idle';
        }""",
        timeout=timeout_ms,
    )


def run_all(page: Any) -> None:
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")


def run_cell(page: Any, index: int) -> None:
    """Select cell ``index`` and start running it (as Shift+Enter would); returns at once."""
    page.evaluate(
        """(i) => {
            const panel = window.jupyterapp.shell.currentWidget;
            panel.content.activeCellIndex = i;
            window.jupyterapp.commands.execute('notebook:run-cell');
        }""",
        index,
    )


def cell_running(page: Any, index: int, timeout_ms: int = PAGE_TIMEOUT_MS) -> None:
    page.wait_for_function(
        "(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].model.executionState === 'running'",
        arg=index,
        timeout=timeout_ms,
    )


def cell_executed(page: Any, index: int, timeout_ms: int = PAGE_TIMEOUT_MS) -> None:
    """Wait until cell ``index`` has an execution count (it ran to the end)."""
    page.wait_for_function(
        """(i) => {
            const panel = window.jupyterapp.shell.currentWidget;
            const cell = panel.content.widgets[i];
            return cell && cell.model.executionState === 'idle' && cell.model.executionCount !== null
                && cell.model.executionCount !== undefined;
        }""",
        arg=index,
        timeout=timeout_ms,
    )


def widget_status(page: Any) -> str | None:
    return page.evaluate("() => { const n = document.querySelector('.nbw'); return n ? n.dataset.status : null; }")


def card_statuses(page: Any) -> list[str]:
    return page.evaluate("() => [...document.querySelectorAll('.nbw-card')].map(c => c.dataset.status)")


def chart_points(page: Any) -> int:
    return page.evaluate(
        "() => { const s = document.querySelector('.nbw-chart'); return s ? Number(s.dataset.points || 0) : 0; }"
    )


def chart_lines(page: Any) -> int:
    """How many workers' lines the chart draws."""
    return page.evaluate(
        "() => { const s = document.querySelector('.nbw-chart'); return s ? Number(s.dataset.lines || 0) : 0; }"
    )


def chart_segments(page: Any) -> int:
    """How many pieces those lines are in (a worker's line starts a new piece where its step goes back)."""
    return page.evaluate(
        "() => { const s = document.querySelector('.nbw-chart'); return s ? Number(s.dataset.segments || 0) : 0; }"
    )


def chart_pixels(page: Any, color: str) -> int:
    """How many pixels of the chart's canvas are (nearly) ``color`` (``#rrggbb``): a drawn line's colour."""
    return page.evaluate(
        """(hex) => {
            const canvas = document.querySelector('.nbw-chart canvas');
            if (!canvas || !canvas.width) return 0;
            const want = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
            const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
            let n = 0;
            for (let i = 0; i < data.length; i += 4) {
                if (data[i + 3] > 200 && want.every((v, k) => Math.abs(data[i + k] - v) < 24)) n++;
            }
            return n;
        }""",
        color,
    )


def log_text(page: Any) -> str:
    return page.evaluate("() => { const p = document.querySelector('.nbw-log'); return p ? p.textContent : ''; }")


def screenshot(page: Any, name: str, selector: str = ".nbw") -> Path:
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / name
    for attempt in range(3):  # finish() re-renders the output once: the element may be replaced meanwhile
        try:
            page.locator(selector).first.screenshot(path=str(path))
            break
        except Exception:
            if attempt == 2:
                raise
            page.wait_for_timeout(500)
    return path


def sidebar_row(name: str) -> str:
    """The selector of the sidebar's row of the run ``name``."""
    return f"{SIDEBAR} .nbw-sb-row[data-name='{name}']"


def wait_sidebar_row(page: Any, name: str, condition: str, timeout_ms: int) -> None:
    """Wait until the sidebar's row of ``name`` satisfies ``condition`` (JS over ``r``, the row's element)."""
    page.wait_for_function(
        f"(sel) => {{ const r = document.querySelector(sel); return !!r && ({condition}); }}", arg=sidebar_row(name),
        timeout=timeout_ms)
