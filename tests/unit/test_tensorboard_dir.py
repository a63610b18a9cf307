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


class StandInTensorFlow:
    """What ReportSummaries uses of TensorFlow (``tf.summary``, ``tf.executing_eagerly``), recording the scalars."""

    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []
        self.summary = self

    def executing_eagerly(self) -> bool:
        return True

    def create_file_writer(self, folder: str):
        import contextlib

        return type("Writer", (), {"as_default": lambda _: contextlib.nullcontext(), "flush": lambda _: None})()

    def scalar(self, name: str, value: float, step: int) -> None:
        self.scalars.append((name, value, step))


def test_report_summaries_write_one_point_per_tag_and_step(tmp_path, monkeypatch):
    from nbworkers.distlib.tensorboard import ReportSummaries

    monkeypatch.setenv("NBWORKERS_RUN_DIR", str(tmp_path))
    tf = StandInTensorFlow()
    with monkeypatch.context() as patched:  # gone from sys.modules before the unit boundary's check
        patched.setitem(__import__("sys").modules, "tensorflow", tf)
        summaries = ReportSummaries()
        summaries.write({"loss": 0.5}, step=None, epoch=None, steps_total=None, iterations=12)  # a throttled batch's
        summaries.write({"loss": 0.5, "val_loss": 0.7}, None, None, None, iterations=12)  # its epoch's, same step
        summaries.write({"loss": 0.4}, None, None, None, iterations=12)  # a changed value at that step is written
        summaries.write({"loss": 0.4}, None, None, None, iterations=16)
    assert tf.scalars == [("loss", 0.5, 12), ("val_loss", 0.7, 12), ("loss", 0.4, 12), ("loss", 0.4, 16)]
