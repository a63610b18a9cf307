"""The one scan of what a cell uses (protocol/cell_scan.py): made once in the kernel, read by the roles check,
the zygotes and the workers' early collectives. No TensorFlow, no processes."""

from __future__ import annotations

import builtins
from argparse import Namespace

from nbworkers.distlib.worker.mwms import collective_startup
from nbworkers.magics.backends import run_env, zygotes
from nbworkers.magics.launch import roles
from nbworkers.magics.notebook.parse import build_spec
from nbworkers.protocol import cell_scan, wire


def test_one_scan_answers_every_question(tmp_path):
    (tmp_path / "main.py").write_text("import os\nos.environ['TF_USE_LEGACY_KERAS'] = '1'\nimport tensorflow\n")
    (tmp_path / "other.py").write_text("strategy = tf.distribute.MultiWorkerMirroredStrategy()\n")
    scan = cell_scan.scan("# ParameterServerStrategy in a comment\nimport main\nx = 1\n", str(tmp_path))
    assert "ParameterServerStrategy" not in scan.names and {"main", "x"} <= scan.names
    assert scan.uses_tensorflow and scan.changes_environment  # through the imported module
    assert scan.multi_worker  # a .py file of the directory mentions MWMS (imported or not)
    plain = cell_scan.scan("import time\ntime.sleep(1)\n", str(tmp_path / "missing"))
    assert not plain.uses_tensorflow and not plain.changes_environment and not plain.multi_worker


def test_each_file_is_read_once(tmp_path, monkeypatch):
    (tmp_path / "main.py").write_text("import tensorflow as tf\n")
    (tmp_path / "unrelated.py").write_text("print('hi')\n")
    opened = []
    real_open = builtins.open

    def counting_open(path, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    cell_scan.scan("import main\n", str(tmp_path))
    assert sorted(opened) == sorted({str(tmp_path / "main.py"), str(tmp_path / "unrelated.py")})


def test_the_workers_and_backends_read_the_kernels_scan_not_the_files(tmp_path):
    cell = tmp_path / "cell.py"
    cell.write_text("import tensorflow as tf\n")  # on its own: no multi-worker strategy, may be forked
    scan = cell_scan.CellScan(uses_tensorflow=True, changes_environment=True, multi_worker=True)
    env = {wire.ENV_CODE: str(cell), wire.ENV_CWD: str(tmp_path), wire.ENV_CELL_SCAN: scan.to_env()}
    assert cell_scan.from_env(env) == scan
    assert collective_startup.code_mentions_multi_worker(env)
    assert "changes its environment" in zygotes.why_not_forked(str(cell), str(tmp_path), cell_scan.from_env(env))
    # without the kernel's scan (a worker started by hand) the worker scans its cell file with the same code
    del env[wire.ENV_CELL_SCAN]
    assert not collective_startup.code_mentions_multi_worker(env)
    assert zygotes.why_not_forked(str(cell), str(tmp_path)) is None
    assert cell_scan.from_env({wire.ENV_CELL_SCAN: "not json"}) is None
    assert wire.ENV_CELL_SCAN in run_env.PER_RUN_VARIABLES  # a zygote is not keyed by the cell
    assert zygotes.zygote_key("python", env) == zygotes.zygote_key("python", {**env, wire.ENV_CELL_SCAN: scan.to_env()})


def _args(tmp_path, **overrides):
    values = dict(workers=2, name="scan", python="", env=[], cwd=str(tmp_path), gpus_per_worker=None, block=False,
                  timeout=None, push=[], max_restarts=None, stall_timeout=None, chief=False, evaluator=0, ps=None)
    return Namespace(**{**values, **overrides})


def test_the_launch_scans_once_and_the_spec_carries_it(tmp_path):
    (tmp_path / "setup.py").write_text("from nbworkers import distlib\n")
    spec = build_spec(_args(tmp_path, ps=1), "tf.estimator.train_and_evaluate(e, t, v)\n", {}, set(), set())
    assert spec.scan is not None and "train_and_evaluate" in spec.scan.names and spec.scan.multi_worker
    assert cell_scan.of_spec(spec) is spec.scan
    assert not any(t.serves for t in roles.plan(2, ps=1, names=spec.scan.names))  # Estimator: the cell runs everywhere
