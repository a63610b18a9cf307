"""Data sharding, the MNIST helper (tfds mock data), the cross-worker GPU-count check, and the
single-process fallback, on real TensorFlow processes (CPU).

No GPU here: the GPU-count check runs the real exchange between two workers through TensorFlow's
coordination service, with mocked per-worker device counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from distlib_helpers import CLUSTER_TIMEOUT_S, run_cluster  # noqa: E402

DATA_CELL = """
import json, types
from nbworkers import distlib
from nbworkers.distlib import collectives
from nbworkers.distlib.worker.mwms import strategy_setup
import tensorflow as tf

info = distlib.task()
strategy = distlib.strategy()


def local_values(distributed):
    return [int(v) for batch in distributed for v in tf.reshape(strategy.experimental_local_results(batch)[0], [-1]).numpy()]


auto = distlib.auto_shard(tf.data.Dataset.range(64).batch(8), "data")
manual = distlib.shard_for_worker(tf.data.Dataset.range(64)).batch(4)
per_worker = distlib.distributed_dataset(strategy, lambda: tf.data.Dataset.range(64), 8, repeat=False)
images = distlib.shard_for_worker(distlib.mnist("train"))
image_count, pixel_range, shapes = 0, [1.0, 0.0], set()
for image, label in images:
    image_count += 1
    shapes.add((tuple(image.shape), image.dtype.name, label.dtype.name))
    pixel_range = [min(pixel_range[0], float(tf.reduce_min(image))), max(pixel_range[1], float(tf.reduce_max(image)))]
print("RESULT", json.dumps({
    "auto": local_values(strategy.experimental_distribute_dataset(auto)),
    "manual": local_values(strategy.experimental_distribute_dataset(manual)),
    "per_worker": local_values(per_worker),
    "mnist_count": image_count, "mnist_shapes": sorted(map(str, shapes)), "pixel_range": pixel_range,
}), flush=True)

# Mocked device counts (worker 0: 1 GPU, worker 1: 2 GPUs) through the real coordination-service exchange.
fake_extended = types.SimpleNamespace(
    _num_devices_per_worker=info.index + 1, _local_device_type="GPU", _cluster_spec=strategy.extended._cluster_spec,
    _id_in_cluster=strategy.extended._id_in_cluster, _num_workers=strategy.extended._num_workers)
try:
    strategy_setup.check_devices_agree(fake_extended)
    print("RESULT", json.dumps({"gpu_error": None}))
except collectives.GpuCountMismatchError as error:
    print("RESULT", json.dumps({"gpu_error": str(error)}))
"""


def test_sharding_gives_each_worker_a_distinct_part_and_gpu_mismatch_is_caught(tmp_path):
    run = run_cluster(DATA_CELL, tmp_path, env={"NBWORKERS_MOCK_DATA": "1", "NBWORKERS_MOCK_EXAMPLES": "64"})
    assert run.returncodes == [0, 0], run.describe()
    assert not run.startup_warnings()
    results = [run.result(0), run.result(1)]
    for kind in ("auto", "manual", "per_worker"):
        first, second = set(results[0][kind]), set(results[1][kind])
        assert first and second and not first & second, (kind, results)  # distinct parts
        assert first | second == set(range(64)), kind  # together: all the data
    for result in results:
        assert result["mnist_count"] == 32  # half of the 64 mock examples each
        assert result["mnist_shapes"] == [str(((28, 28, 1), "float32", "int64"))]
        assert 0.0 <= result["pixel_range"][0] <= result["pixel_range"][1] <= 1.0
        assert "worker 0: 1, worker 1: 2" in result["gpu_error"]


def test_without_tf_config_the_same_code_runs_in_one_process(tmp_path):
    code = textwrap.dedent(
        """
        import json
        import numpy as np
        from nbworkers import distlib
        import tensorflow as tf
        import keras
        features = np.random.RandomState(0).rand(256, 8).astype("float32")
        labels = (features.sum(axis=1) > 4).astype("int64")
        dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(32)
        strategy = distlib.strategy()
        with strategy.scope():
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
            model.compile(optimizer=keras.optimizers.Adam(0.05),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        ours = distlib.fit(model, dataset, epochs=2, steps_per_epoch=4, verbose=0)
        theirs = model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0,  # Keras 3 fit works off-cluster
                           callbacks=[distlib.ReportCallback()])  # and takes our callback
        with distlib.write_dir("out") as target:
            chief_dir = str(target)
        print("RESULT", json.dumps({"strategy": type(strategy).__name__, "loss": ours.history["loss"],
              "keras_fit_loss": theirs.history["loss"], "chief": distlib.is_chief(), "dir": chief_dir}))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBWORKERS_") and k != "TF_CONFIG"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=CLUSTER_TIMEOUT_S)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["strategy"] == "MirroredStrategy" and result["chief"] and result["dir"] == "out"
    assert len(result["loss"]) == 2 and len(result["keras_fit_loss"]) == 1


def test_strategy_hands_the_chosen_collective_to_tensorflow(tmp_path):
    """Mocked GPU count (no GPU here): with GPUs seen, strategy() builds MultiWorkerMirroredStrategy with NCCL
    communication options; communication="ring" overrides it. A one-worker TF_CONFIG cluster is enough."""
    from distlib_helpers import free_ports, tf_config

    code = textwrap.dedent(
        """
        import json
        from nbworkers.distlib import strategies
        strategies.local_gpu_count = lambda: 2  # mock: this worker "sees" 2 GPUs
        auto = strategies.strategy()
        ring = strategies.strategy(communication="ring")
        print("RESULT", json.dumps({"type": type(auto).__name__,
              "auto": str(auto.extended._communication_options.implementation),
              "ring": str(ring.extended._communication_options.implementation)}))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBWORKERS_")}
    env.update(TF_CONFIG=tf_config(free_ports(1), 0), TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=CLUSTER_TIMEOUT_S)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result == {"type": "CollectiveAllReduceStrategy", "auto": "CommunicationImplementation.NCCL",
                      "ring": "CommunicationImplementation.RING"}
