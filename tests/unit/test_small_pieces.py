"""Small pure pieces: log tails, GPU assignment, names, TF_CONFIG, the relay's checks."""

from __future__ import annotations

import json
import math

import pytest

from nbworkers.magics.launch.gpus import GpuAssignmentError, assign_gpus
from nbworkers.magics.launch.names import fresh_name, valid_name
from nbworkers.magics.frameworks.tensorflow import tf_configs
from nbworkers.magics.launch.tfconfig import plan_tasks
from nbworkers.magics.run.core.logtail import LogTail
from nbworkers.magics.run.core.state import WorkerState
from nbworkers.magics.run.relay import RelayReceiver
from nbworkers.protocol import wire


def test_log_tail_collapses_progress_bars_and_stays_bounded():
    tail = LogTail(3)
    tail.feed(["Epoch 1/2\n", "1/5 [==>...]\r2/5 [====>.]\r", "5/5 [======] - loss 0.3\n", "x\ny\n"])
    assert tail.lines() == ["5/5 [======] - loss 0.3", "x", "y"]
    tail.feed(["partial", " line\n"])
    assert tail.lines()[-1] == "partial line"
    assert tail.total == 5


def test_gpu_assignment_never_shares_a_gpu():
    assert assign_gpus(2, None, []) == ["-1", "-1"]
    assert assign_gpus(2, 0, ["0", "1"]) == ["-1", "-1"]
    assert assign_gpus(2, None, ["0", "1", "2", "3"]) == ["0,1", "2,3"]
    assert assign_gpus(2, 1, ["4", "5", "6"]) == ["4", "5"]
    with pytest.raises(GpuAssignmentError, match="needs 4 GPUs"):
        assign_gpus(2, 2, ["0", "1"])
    with pytest.raises(GpuAssignmentError, match="--gpus-per-worker 0"):
        assign_gpus(3, None, ["0", "1"])


def test_names_are_fresh_and_safe():
    taken = {fresh_name(set()) for _ in range(5)}
    assert fresh_name(taken) not in taken
    for bad in ("..", "a/b", "../x", "", "a" * 65, "x..y", "/abs"):
        assert not valid_name(bad), bad
    assert valid_name("brisk-heron-2")


def test_tf_config_per_worker():
    configs = [json.loads(c) for c in tf_configs(plan_tasks(2), "localhost", [1111, 2222])]
    assert configs[0] == {"cluster": {"worker": ["localhost:1111", "localhost:2222"]}, "task": {"type": "worker", "index": 0}}
    assert configs[1]["task"] == {"type": "worker", "index": 1}


def test_relay_checks_signature_and_schema():
    key = wire.new_key()
    relay = RelayReceiver(key)
    good = wire.Sender(relay.address, key, worker=1, gen=0)
    forged = wire.Sender(relay.address, wire.new_key(), worker=1, gen=0)
    try:
        good.send("metrics", metrics={"loss": 0.25}, step=3)
        forged.send("metrics", metrics={"loss": 9.0}, step=3)
        good.send("log", lines="not a list")
        received = []
        for _ in range(40):
            received += relay.poll(0.05)
            if relay.drops.total == 2 and received:
                break
        assert [(m.kind, m.content["metrics"]) for m in received] == [("metrics", {"loss": 0.25})]
        assert relay.drops.bad_signature == 1 and relay.drops.malformed == 1
    finally:
        good.close(0)
        forged.close(0)
        relay.close()


def test_a_diverged_loss_reaches_the_kernel_as_nan():
    key = wire.new_key()
    relay = RelayReceiver(key)
    sender = wire.Sender(relay.address, key, worker=0, gen=0)
    try:
        sender.send("metrics", metrics={"loss": float("nan"), "grad": float("inf"), "low": float("-inf"), "acc": 0.5}, step=7)
        received = []
        for _ in range(40):
            received += relay.poll(0.05)
            if received:
                break
        assert relay.drops.total == 0, relay.drops.reasons
        metrics = received[0].content["metrics"]
        assert math.isnan(metrics["loss"]) and metrics["grad"] == math.inf and metrics["low"] == -math.inf
        assert metrics["acc"] == 0.5
    finally:
        sender.close(0)
        relay.close()
    assert wire.validate("metrics", {"worker": 0, "gen": 0, "metrics": {"loss": "oops"}}) is not None


def test_chart_x_counts_steps_across_one_based_epochs():
    worker = WorkerState(index=0)
    xs = []
    for epoch in (1, 2):
        for step in (1, 2, 3):
            worker.apply_metrics({"epoch": epoch, "step": step, "steps_total": 3, "metrics": {"loss": 1.0}})
            xs.append(worker.history[-1][0])
    assert xs == [1, 2, 3, 4, 5, 6]
    only_epochs = WorkerState(index=1)
    for epoch in (1, 2, 3):
        only_epochs.apply_metrics({"epoch": epoch, "metrics": {"loss": 1.0}})
    assert [x for x, _ in only_epochs.history] == [1, 2, 3]


def test_a_new_status_without_detail_clears_the_old_detail():
    worker = WorkerState(index=0)
    worker.apply_status("waiting", "waiting for 1 peer")
    assert (worker.status, worker.detail) == ("waiting", "waiting for 1 peer")
    worker.apply_status("running")
    assert (worker.status, worker.detail) == ("running", "")
    worker.apply_status("running", "evaluated the checkpoint of step 20")
    worker.apply_status("running")
    assert worker.detail == "evaluated the checkpoint of step 20"
