"""Every tutorial notebook, executed headless top to bottom (nbclient) with mock data, as a reader would run it.

Each notebook runs in a temporary copy of ``tutorials/`` with a real kernel (this venv's ipykernel) whose
environment has ``NBWORKERS_MOCK_DATA=1`` (the one setting that switches the tutorials to
``tfds.testing.mock_data``) and ``NBWORKERS_RUN_ROOT`` in a temporary directory. A notebook fails the test on
any cell error, including its result cell, which asserts that the final loss and accuracy are in range and
that the workers ended in sync. The test also checks that the final summary of every training run is in
the saved output of the cell that started it, and that no worker process is left afterwards.

Each executed notebook then goes into the documentation site's notebook cache (tests/docs_site.py), and the last
test here builds the site from it, as `make docs` does, executing no tutorial a second time, and opens its pages in
chromium (docs/development.md, "The documentation site").
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import nbformat
import pytest
from browser_helpers import CHROMIUM, chromium_page
from conftest import kill_leftovers, processes_of_run_root, wait_until
import docs_site
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

REPO = Path(__file__).resolve().parents[2]
TUTORIALS = REPO / "tutorials"
TF215_PYTHON = REPO / ".venv-tf215" / "bin" / "python"
NOTEBOOK_TIMEOUT = 900  # seconds for one notebook on 2 shared cores (they take well under a minute alone)
CELL_TIMEOUT = 600  # seconds for one cell (a blocking wait for a training run)
KERNEL_START_TIMEOUT = 120  # seconds for the kernel to start
LEFTOVER_TIMEOUT = 20  # seconds for worker processes to be gone after the kernel shut down
SUMMARY_MARKER = "nbw-summary"  # the final summary's HTML (magics/views/summary.py render_summary_html)
DEMO_TIMEOUT = 900  # seconds for `python -m nbworkers.demo`

SITE_BUILD_TIMEOUT = 1800  # s for the site's build; it executes the tutorials its cache lacks (~3 min for all alone)

NOTEBOOKS = sorted(p.name for p in TUTORIALS.glob("*.ipynb"))
OUTCOMES: dict[str, bool] = {}  # tutorial -> executed without error in this pytest run (the site's test reads it)


def worker_cells(notebook) -> list:
    return [c for c in notebook.cells if c.cell_type == "code" and c.source.lstrip().startswith("%%worker")]


def html_of(cell) -> str:
    return "\n".join(str(o.get("data", {}).get("text/html", "")) for o in cell.get("outputs", []))


@pytest.mark.slow
@pytest.mark.timeout(NOTEBOOK_TIMEOUT + 120)
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_tutorial_runs_headless_and_its_result_checks(name, tmp_path):
    workdir = tmp_path / "tutorials"
    shutil.copytree(TUTORIALS, workdir, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    run_root = tmp_path / "runs"
    run_root.mkdir()
    env = dict(os.environ)
    env.update({
        "NBWORKERS_MOCK_DATA": "1",
        "NBWORKERS_RUN_ROOT": str(run_root),
        "TF_CPP_MIN_LOG_LEVEL": "1",
        "NBWORKERS_TF215_PYTHON": str(TF215_PYTHON) if TF215_PYTHON.exists() else "",
        # zygotes on, each started by the first run that needs it (as conftest's kernels): a prewarmed one imports
        # TensorFlow for this venv at %load_ext, which 04 (TF 2.15's python) and 08 (JAX's zygote) never fork from
        "NBWORKERS_ZYGOTE_PREWARM": "0",
    })
    env.pop("TF_CONFIG", None)
    notebook = nbformat.read(workdir / name, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT,
        startup_timeout=KERNEL_START_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    # The kernel is this venv's ipykernel (whatever "python3" kernelspec the machine has elsewhere).
    client.km = client.create_kernel_manager()
    client.km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    OUTCOMES[name] = False
    try:
        client.execute(env=env, cwd=str(workdir))
    except CellExecutionError as error:
        nbformat.write(notebook, tmp_path / f"failed-{name}")
        pytest.fail(f"{name} failed (executed copy: {tmp_path / f'failed-{name}'}):\n{error}")
    finally:
        nbformat.write(notebook, tmp_path / f"executed-{name}")
        assert wait_until(lambda: not processes_of_run_root(run_root), LEFTOVER_TIMEOUT), (
            f"{name}: worker processes outlived the kernel: {kill_leftovers(run_root)}"
        )
    trained = worker_cells(notebook)
    assert trained, f"{name} has no %%worker cell"
    for cell in trained:
        assert SUMMARY_MARKER in html_of(cell), (
            f"{name}: no final summary in the output of the cell\n{cell.source[:200]}\n"
            f"outputs: {[o.get('output_type') for o in cell.outputs]}"
        )
    OUTCOMES[name] = True
    docs_site.store_executed(name, notebook)  # the site's page of this tutorial shows these outputs (see below)


@pytest.mark.slow
@pytest.mark.installed  # the README's first command, on the wheel (make test-installed)
@pytest.mark.timeout(DEMO_TIMEOUT + 60)
def test_demo_trains_prints_progress_and_result_and_leaves_nothing(tmp_path):
    env = dict(os.environ)
    env.pop("NBWORKERS_MOCK_DATA", None)  # the demo sets it itself
    env["TMPDIR"] = str(tmp_path)  # the demo's run root is a temporary directory: here, so we can look for leftovers
    done = subprocess.run([sys.executable, "-m", "nbworkers.demo"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=DEMO_TIMEOUT)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "epoch 3/3 step 4/4" in out and "workers in sync: yes" in out and "nbworkers demo OK" in out, out
    assert "worker 0: loss" in out and "worker 1: loss" in out, out
    assert not kill_leftovers(tmp_path), "the demo left worker processes behind"


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.timeout(SITE_BUILD_TIMEOUT + 300)
def test_docs_site_builds_with_the_tutorials_outputs_and_its_pages_open_in_chromium(tmp_path):
    """`make docs`' build of the site (warnings are errors), then its pages in chromium: the index, a tutorial with
    its outputs, the reference with every %%worker option, the search. Last in this module: the tutorials executed
    above are in the site's notebook cache (docs_site.store_executed), so the build executes none of them again; run
    alone, it executes the tutorials its cache lacks, as `make docs` on a fresh clone does."""
    failed = sorted(name for name, ok in OUTCOMES.items() if not ok)
    assert not failed, f"tutorials that failed in this run (the site's build would execute them again): {failed}"
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} missing: make browser-deps (the site's test never skips)"
    missing = [name for name in NOTEBOOKS if not docs_site.cached(name)]
    assert not set(missing) & set(OUTCOMES), f"executed in this run but not in the site's cache: {missing}"
    env = dict(os.environ)
    env.update({"NBWORKERS_RUN_ROOT": str(tmp_path / "runs"), "TF_CPP_MIN_LOG_LEVEL": "1",
                "NBWORKERS_TF215_PYTHON": str(TF215_PYTHON) if TF215_PYTHON.exists() else ""})
    env.pop("TF_CONFIG", None)
    env.pop("NBWORKERS_DOCS_EXECUTION", None)
    (tmp_path / "runs").mkdir(mode=0o700)
    done = docs_site.build(tmp_path, env, SITE_BUILD_TIMEOUT)
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"the site's build failed:\n{log[-8000:]}"
    assert log.count(docs_site.EXECUTING) == len(missing), f"executed other than {missing}:\n{log[-4000:]}"
    html_dir = tmp_path / "html"
    assert not docs_site.broken_links(html_dir), "\n".join(docs_site.broken_links(html_dir))
    assert not docs_site.external_links(html_dir), docs_site.external_links(html_dir)

    for name in NOTEBOOKS:  # every tutorial is a page with its outputs
        page = (html_dir / "tutorials" / name.replace(".ipynb", ".html")).read_text(encoding="utf-8")
        runs = len(worker_cells(nbformat.read(TUTORIALS / name, as_version=4)))
        assert 'class="cell_output' in page and page.count(SUMMARY_MARKER) >= runs, f"{name}: its page lacks outputs"

    from nbworkers.magics.notebook.magic import WorkerMagics

    options = [o for a in WorkerMagics.worker.parser._actions for o in a.option_strings if o not in ("-h", "--help")]
    with _served(html_dir) as base, chromium_page() as page:
        outside: list[str] = []
        missing_files: list[str] = []
        page.on("request", lambda r: not r.url.startswith((base, "data:")) and outside.append(r.url))
        page.on("response", lambda r: r.status >= 400 and not r.url.endswith("/favicon.ico")
                and missing_files.append(f"{r.status} {r.url}"))
        page.goto(f"{base}/index.html")
        assert "nbworkers" in page.title()
        page.get_by_role("link", name="Get started").first.click()
        page.wait_for_url("**/get-started.html")
        assert page.locator("img[src*='widget.png']").count() == 1

        page.goto(f"{base}/tutorials/01_quickstart.html")
        page.locator(".cell_output").first.wait_for()
        summary = page.locator(f".{SUMMARY_MARKER}").first
        summary.wait_for()
        assert summary.is_visible() and "worker" in summary.inner_text()

        page.goto(f"{base}/reference/worker.html")
        text = page.locator("main").inner_text()
        assert not [o for o in options if o not in text], [o for o in options if o not in text]
        assert "usage: %%worker" in text

        page.goto(f"{base}/search.html?q=session")
        page.locator("#search-results li").first.wait_for()
        assert page.locator("#search-results li").count() >= 3
        assert not outside, f"the site loaded from elsewhere: {outside}"
        assert not missing_files, missing_files
        errors = [e for e in page.console_errors  # the theme's note on a first visit (no saved light/dark mode)
                  if "invalid theme mode" not in e and "Failed to load resource" not in e]
        assert not errors, errors


@contextlib.contextmanager
def _served(directory: Path):
    """The built site over HTTP on 127.0.0.1 (a thread of this process), stopped afterwards."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        pass
