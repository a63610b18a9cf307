"""distlib.tensorboard_dir(): each worker its own folder, also without TF_CONFIG (``--framework jax``: the worker's
index from NBWORKERS_WORKER), so two JAX workers' report() summaries never share one."""

from __future__ import annotations

import json

from nbworkers.distlib.tensorboard import tensorboard_dir


def test_each_worker_has_its_folder_with_tf_config_and_without(tmp_path, monkeypatch):
    monkeypatch.setenv("NBWORKERS_RUN_DIR", str(tmp_path))
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("NBWORKERS_WORKER", "1")
    assert tensorboard_dir() == str(tmp_path / "tensorboard" / "worker-1")  # a JAX run's worker 1
    monkeypatch.delenv("NBWORKERS_WORKER")
    assert tensorboard_dir() == str(tmp_path / "tensorboard" / "worker-0")  # outside a group: the one local worker
    monkeypatch.setenv("NBWORKERS_WORKER", "1")
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"chief": ["a:1"], "worker": ["b:2"]},
                                                "task": {"type": "worker", "index": 0}}))
    assert tensorboard_dir() == str(tmp_path / "tensorboard" / "worker-0")  # TF_CONFIG's task, as before
