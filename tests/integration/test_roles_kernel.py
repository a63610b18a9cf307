"""Role mistakes a real kernel stops before anything starts, and an evaluator that reads the whole dataset
(a real TensorFlow process)."""

from __future__ import annotations

import json


def test_role_mistakes_in_the_kernel_stop_before_anything_starts(kernel, run_root):
    cases = {
        "%%worker -n 2 --ps 0\nprint(1)": "--ps 0",
        "%%worker -n 2 --evaluator 2\nprint(1)": "at most one evaluator",
        "%%worker -n 0 --evaluator\nprint(1)": "there must be workers",
        "%%worker -n 2 --ps 1\nimport tensorflow as tf\ns = tf.distribute.MultiWorkerMirroredStrategy()": "no parameter servers",
    }
    for cell, message in cases.items():
        result = kernel.run(cell)
        assert result.failure and message in result.failure, (cell, result.text)
    assert not list(run_root.iterdir()), "a role mistake started something"
    usage = kernel.run("%%worker --help\npass").stdout
    assert "--chief" in usage and "--evaluator" in usage and "--ps N" in usage


def test_the_evaluator_reads_the_whole_dataset():
    """shard_for_worker shards among the training tasks only (TensorFlow imported in a child process)."""
    import subprocess
    import sys

    code = """
import json
import tensorflow as tf
from nbworkers.distlib.cluster import parse_tf_config
from nbworkers.distlib.data import shard_for_worker
cluster = {"chief": ["h:1"], "worker": ["h:2"]}
def seen(task_type):
    info = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": task_type, "index": 0}}))
    return [int(x) for x in shard_for_worker(tf.data.Dataset.range(6), info)]
print(json.dumps([seen("chief"), seen("worker"), seen("evaluator")]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[0, 2, 4], [1, 3, 5], [0, 1, 2, 3, 4, 5]]
