"""When a worker saves on SIGTERM (distlib/worker/preemption.py): only cluster workers, and it can be turned
off. No TensorFlow, no processes."""

from __future__ import annotations


def test_preemption_saving_is_on_only_for_cluster_workers_and_can_be_turned_off(monkeypatch):
    from nbworkers.distlib.worker import preemption

    tf_config = '{"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 0}}'
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv(preemption.ENV_PREEMPTION, raising=False)
    assert not preemption.enabled() and preemption.saver() is None  # a plain script: SIGTERM kills as usual
    with preemption.training(lambda: None) as guard:
        guard.step_done()  # a no-op without a saver
    monkeypatch.setenv("TF_CONFIG", tf_config)
    assert preemption.enabled()
    monkeypatch.setenv(preemption.ENV_PREEMPTION, "0")
    assert not preemption.enabled()
    monkeypatch.delenv("TF_CONFIG")
    monkeypatch.setenv(preemption.ENV_PREEMPTION, "1")
    assert preemption.enabled()
