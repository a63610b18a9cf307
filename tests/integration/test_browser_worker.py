"""The live widget end to end: a real JupyterLab, Debian chromium through Playwright, `%%worker -n 2` runs.

Each test opens its own notebook in one shared JupyterLab server (module fixture) whose kernels write their
runs under a temporary run root.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import psutil
import pytest
from browser_helpers import (  # noqa: E402
    REPO,
    card_statuses,
    cell_executed,
    chart_points,
    chromium_page,
    lab_server,
    log_text,
    open_notebook,
    run_cell,
    screenshot,
    widget_status,
    write_notebook,
)

pytestmark = pytest.mark.browser
RUN_TIMEOUT_MS = 240_000  # a real 2-worker TensorFlow run on 2 shared cores
STOP_TIMEOUT_MS = 60_000  # Stop -> cards say stopped (stop_grace is 5 s)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PROCESS_EXIT_TIMEOUT = 30.0  # s for every worker process to be gone after the cards say stopped

TRAIN_CELL = """%%worker -n 2 --name {name} --env TF_USE_LEGACY_KERAS=1
import os, time
import numpy as np
import tensorflow as tf
from nbworkers.distlib import ReportCallback
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.RandomState(int(os.environ["NBWORKERS_WORKER"]))
x = rng.rand(512, 8).astype("float32")
y = (x.sum(axis=1) > 4).astype("float32")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(loss="binary_crossentropy", optimizer=tf.keras.optimizers.SGD(0.5), metrics=["accuracy"])
pace = tf.keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep({pause}))
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
model.fit(dataset, epochs={epochs}, steps_per_epoch=30, callbacks=[ReportCallback(), pace], verbose=2)
print("done training")
"""

# Keras 3 with its default progress bar (verbose=1: escape codes, backspaces, carriage returns): the widget's log
# shows one plain line per finished bar (protocol/terminal.py; issue 43)
KERAS3_TRAIN_CELL = TRAIN_CELL.replace(" --env TF_USE_LEGACY_KERAS=1", "").replace(", verbose=2", "")
REPORT_LOOP_CELL = """%%worker -n 2 --name {name}
import time
from nbworkers.distlib import report
for step in range(1, 1_000_000):
    report(step=step, loss=1.0 / step ** 0.5)
    if step % 10 == 0:
        print("step", step, flush=True)
    time.sleep(0.02)
"""

FLOOD_CELL = """%%worker -n 2 --name {name}
for i in range(100_000):
    print(f"flood line {{i}}")
print("LAST LINE", flush=True)
"""

RECORD_STATUSES = """() => {
    window.__nbwSeen = new Set();
    setInterval(() => document.querySelectorAll('.nbw-card').forEach(c => window.__nbwSeen.add(c.dataset.status)), 50);
}"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab-worker")
    with lab_server(tmp, env_extra={"NBWORKERS_RUN_ROOT": str(tmp / "runs")}) as server:
        server.run_root = tmp / "runs"
        yield server


def worker_processes(run_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("NBWORKERS_RUN_DIR", "").startswith(str(run_dir)) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def wait_gone(run_dir: Path, timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := worker_processes(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def start(page, lab, notebook: str, cell: str) -> None:
    write_notebook(lab.root / notebook, ["%load_ext nbworkers", cell])
    open_notebook(page, lab, notebook)
    page.evaluate(RECORD_STATUSES)
    run_cell(page, 0)
    cell_executed(page, 0)
    run_cell(page, 1)
    page.wait_for_selector(".nbw .nbw-card", timeout=RUN_TIMEOUT_MS)


def wait_status(page, status: str, timeout_ms: int) -> None:
    page.wait_for_function(f"() => document.querySelector('.nbw').dataset.status === {status!r}", timeout=timeout_ms)


def test_training_run_cards_chart_and_log(lab):
    with chromium_page() as page:
        start(page, lab, "train.ipynb", KERAS3_TRAIN_CELL.format(name="train", epochs=3, pause=0.05))
        cell_executed(page, 1)  # %%worker returned at once; the widget goes on updating
        page.wait_for_function("() => Number(document.querySelector('.nbw-chart').dataset.points) > 3", timeout=RUN_TIMEOUT_MS)
        screenshot(page, "widget-train-running.png")
        wait_status(page, "finished", RUN_TIMEOUT_MS)
        seen = set(page.evaluate("() => [...window.__nbwSeen]"))
        assert card_statuses(page) == ["finished", "finished"]
        assert "running" in seen and seen & {"starting", "waiting"}, seen
        assert chart_points(page) > 3
        text = log_text(page)
        assert "done training" in text and "Epoch 3/3" in text
        assert not any(code in text for code in ("\x1b", "\b", "\r", "[37", "[0m")), repr(text)
        assert sum(line.startswith("30/30 ━") for line in text.splitlines()) == 3, text  # one finished bar an epoch
        assert "full log: " + str(lab.run_root / "train" / "worker-0.log") in page.inner_text(".nbw-logpath")
        assert "epoch 3/3" in page.inner_text(".nbw-card")
        shot = screenshot(page, "widget-train-finished.png")
        if os.environ.get("NBWORKERS_UPDATE_SCREENSHOT") == "1":  # the README's picture; tests leave the tree alone
            shutil.copyfile(shot, REPO / "docs" / "widget.png")
        # the notebook saved from the page keeps the final summary beside the widget (GitHub, nbconvert)
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.content.widgets[1].model.outputs.toJSON()"
            ".some(o => String((o.data || {})['text/plain'] || '').includes('finished'))"
        )
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
        saved = json.loads((lab.root / "train.ipynb").read_text())
        data = [o["data"] for o in saved["cells"][1]["outputs"] if "data" in o]
        # a finished run is saved as its summary, not as a widget view no later session could show
        assert len(data) == 1 and WIDGET_MIME not in data[0] and "nbw-summary" in "".join(data[0]["text/html"])
        plain = "".join(data[0]["text/plain"])
        assert "nbworkers cluster train: finished, 2 workers, in" in plain and "worker-1.log" in plain


def test_stop_button_stops_every_worker(lab):
    with chromium_page() as page:
        start(page, lab, "stop.ipynb", TRAIN_CELL.format(name="long", epochs=10_000, pause=0.01))
        page.wait_for_function("() => Number(document.querySelector('.nbw-chart').dataset.points) > 2", timeout=RUN_TIMEOUT_MS)
        assert len(worker_processes(lab.run_root / "long")) >= 2
        page.click(".nbw-stop")
        wait_status(page, "stopped", STOP_TIMEOUT_MS)
        assert card_statuses(page) == ["stopped", "stopped"]
        assert not wait_gone(lab.run_root / "long", PROCESS_EXIT_TIMEOUT)
        screenshot(page, "widget-train-stopped.png")


def test_reload_mid_run_shows_the_dashboard_still_updating(lab):
    with chromium_page() as page:
        start(page, lab, "reload.ipynb", REPORT_LOOP_CELL.format(name="reload"))
        cell_executed(page, 1)
        page.wait_for_function("() => Number(document.querySelector('.nbw-chart').dataset.points) > 5", timeout=RUN_TIMEOUT_MS)
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        page.reload()
        page.wait_for_selector(".nbw .nbw-card", timeout=RUN_TIMEOUT_MS)
        assert widget_status(page) == "running"
        assert card_statuses(page) == ["running", "running"]
        before = page.evaluate("() => document.querySelector('.nbw-log').textContent")
        page.wait_for_function(
            "(before) => document.querySelector('.nbw-log').textContent !== before", arg=before, timeout=RUN_TIMEOUT_MS
        )
        assert chart_points(page) > 5
        screenshot(page, "widget-reloaded.png")
        page.click(".nbw-stop")
        wait_status(page, "stopped", STOP_TIMEOUT_MS)
        assert not wait_gone(lab.run_root / "reload", PROCESS_EXIT_TIMEOUT)


def test_flood_of_output_keeps_the_page_responsive(lab):
    with chromium_page() as page:
        start(page, lab, "flood.ipynb", FLOOD_CELL.format(name="flood"))
        # while the workers print: the page answers and its controls work
        for _ in range(3):
            page.click(".nbw-tab[data-index='1']")
            page.wait_for_selector(".nbw-tab-active[data-index='1']", timeout=10_000)
            page.click(".nbw-tab[data-index='0']")
            page.wait_for_selector(".nbw-tab-active[data-index='0']", timeout=10_000)
        wait_status(page, "finished", RUN_TIMEOUT_MS)
        text = log_text(page)
        assert text.rstrip().endswith("LAST LINE") and "flood line 99999" in text
        assert len(text.splitlines()) <= 300
        screenshot(page, "widget-flood.png")
        assert page.locator("text=IOPub message rate exceeded").count() == 0
    log = lab.log()
    assert "IOPub message rate exceeded" not in log and "IOPub data rate exceeded" not in log
    assert (lab.run_root / "flood" / "worker-1.log").read_text().count("flood line") == 100_000


def test_restart_button_relaunches_the_group(lab):
    with chromium_page() as page:
        start(page, lab, "restart.ipynb", REPORT_LOOP_CELL.format(name="again"))
        page.wait_for_function("() => Number(document.querySelector('.nbw-chart').dataset.points) > 3", timeout=RUN_TIMEOUT_MS)
        first_pids = page.evaluate("() => [...document.querySelectorAll('.nbw-card-host')].map(n => n.textContent)")
        page.click(".nbw-restart")
        page.wait_for_function(
            "() => document.querySelector('.nbw-meta').textContent.includes('1 restart')", timeout=STOP_TIMEOUT_MS
        )
        wait_status(page, "running", RUN_TIMEOUT_MS)
        page.wait_for_function(
            "(first) => { const now = [...document.querySelectorAll('.nbw-card-host')].map(n => n.textContent);"
            " return now.every((t, i) => t.includes('pid') && t !== first[i]); }",
            arg=first_pids,
            timeout=RUN_TIMEOUT_MS,
        )
        page.wait_for_function("() => Number(document.querySelector('.nbw-chart').dataset.points) > 3", timeout=RUN_TIMEOUT_MS)
        screenshot(page, "widget-restarted.png")
        page.click(".nbw-stop")
        wait_status(page, "stopped", STOP_TIMEOUT_MS)
        assert not wait_gone(lab.run_root / "again", PROCESS_EXIT_TIMEOUT)
