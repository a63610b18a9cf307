"""TensorBoard: a 2-worker Keras run's summaries land in the run's directory, one folder per worker,
TensorBoard's own event reader finds them, `%workers tensorboard NAME` serves them and dies with the kernel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest
from cells import IMPORTS, KERAS_MODEL, worker_cell
from conftest import wait_until

from nbworkers.tensorboard_proxy import forward

pytest.importorskip("tensorboard", reason="pip install 'nbworkers[tensorboard]'")

KERAS_RUN = worker_cell("-n 2 --block --name tb --env TF_USE_LEGACY_KERAS=1", IMPORTS, "from nbworkers import distlib\n",
                        KERAS_MODEL, """model.fit(dataset, epochs=2, steps_per_epoch=4, verbose=0,
          callbacks=[distlib.TensorBoard(), distlib.ReportCallback()])
print("TBDIR", distlib.tensorboard_dir())
""")
TENSORBOARD_UP_TIMEOUT = 120  # s: TensorBoard's process imports TensorFlow on 2 shared cores


READ_TAGS = """
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
found = {}
for path in sys.argv[1:]:
    accumulator = EventAccumulator(path)
    accumulator.Reload()
    tags = accumulator.Tags()
    found[path] = sorted(set(tags.get("scalars", [])) | set(tags.get("tensors", [])))
print(json.dumps(found))
"""


def scalar_tags(*paths) -> dict[str, set[str]]:
    """Each folder's scalar tags by TensorBoard's own event reader, in one process of its own (it imports TensorFlow,
    which changes os.environ; one process for every folder: one TensorFlow import, ~5 s of CPU, not one a folder)."""
    done = subprocess.run([sys.executable, "-c", READ_TAGS, *map(str, paths)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {path: set(found[str(path)]) for path in paths}


def tensorboard_processes(logdir) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            tied = any("nbworkers.procs.tied" in part for part in cmdline)  # its host: counted apart
            if not tied and any("tensorboard_server" in part for part in cmdline) and str(logdir) in cmdline:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
        except psutil.Error:
            continue
    return found


def test_keras_run_summaries_per_worker_and_tensorboard_dies_with_the_kernel(kernel, run_root):
    ran = kernel.run(KERAS_RUN)
    assert ran.status == "ok", ran.failure or ran.text
    board_root = run_root / "tb" / "tensorboard"
    assert sorted(p.name for p in board_root.iterdir()) == ["worker-0", "worker-1"]
    reports = [board_root / worker / "report" for worker in ("worker-0", "worker-1")]
    train = board_root / "worker-0" / "train"
    tags = scalar_tags(*reports, train)
    # report()'s metrics, every worker in its own folder
    for report in reports:
        assert "loss" in tags[report], (report, tags)
    # the Keras TensorBoard callback: the chief's files stay (tf_keras removes the other workers' temporary ones)
    assert list(train.glob("events.out.tfevents.*")) and any("loss" in t for t in tags[train]), tags

    shown = kernel.run("%workers tensorboard tb", timeout=TENSORBOARD_UP_TIMEOUT + 30)
    assert shown.status == "ok", shown.failure
    url = "/nbworkers/tensorboard/tb/"  # through the Jupyter server (tests/integration/test_serverext.py serves it for real)
    assert url in shown.stdout, shown.stdout
    assert any(f'src="{url}"' in d.get("text/html", "") for d in shown.displays), shown.displays
    # TensorBoard itself: on a Unix socket of ours, no TCP port
    socket_path = (run_root / "tb" / "tensorboard.socket").read_text()
    status, _, _, body = forward(socket_path, "GET", "/data/runs", None, {}, 30)
    runs = json.loads(body)
    assert status == 200 and {"worker-0/report", "worker-1/report", "worker-0/train"} <= set(runs), runs
    assert not [c for p in tensorboard_processes(board_root) for c in p.net_connections("inet")]
    again = kernel.run("%workers tensorboard tb")  # the same TensorBoard, not a second one
    assert url in again.stdout and len(tensorboard_processes(board_root)) == 1
    assert kernel.value("'tensorflow' in __import__('sys').modules") is False

    assert tensorboard_processes(board_root)
    os.kill(kernel.pid, signal.SIGKILL)
    assert wait_until(lambda: not tensorboard_processes(board_root), 15), "TensorBoard outlived a kill -9 of its kernel"
