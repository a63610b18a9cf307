"""A session's saved state on Ray nodes that share no directory (issue 31): the save travels from the node that made
it to the kernel and on to the new workers (magics/backends/ray/nodes/state_copy.py). The nodes of this folder's cluster
are on this machine, so the kernel makes them believe they do not see its files, as the unshared-logs test of
test_ray_backend.py does; each node then keeps its own run directory (one per Ray node), where no other node looks.
The copy's logic is unit-tested with a fake actor (tests/unit/test_backends_ray_state_copy.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from ray_helpers import WORKERS_UP_TIMEOUT

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

NAME = "raysave"
BUILD = """%%worker {flags}--session raysave --block
import os
import numpy as np
import tensorflow as tf
import keras
from nbworkers import distlib

strategy = distlib.strategy()
rng = np.random.default_rng(int(os.environ["NBWORKERS_WORKER"]))
x = rng.normal(size=(64, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
with strategy.scope():  # a small Keras model and a standalone Adam, trained by a traced step
    keras.utils.set_random_seed(1)
    net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    opt = keras.optimizers.Adam(0.01)

@tf.function
def step(xb, yb):
    def replica(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(yb, net(xb), from_logits=True))
        opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
    strategy.run(replica, (xb, yb))
"""
TRAIN = """%%worker --session raysave --block
for xb, yb in dataset.take(6):
    step(xb, yb)
"""
RAISE_ON_ONE = """%%worker --session raysave --block
if os.environ["NBWORKERS_WORKER"] == "1":
    raise ValueError("only worker 1 fails")
strategy.reduce("SUM", strategy.run(lambda: tf.ones(())), axis=None)  # worker 0 waits in the all-reduce
"""
SESSION = f"nbworkers.session({NAME!r})"
STATE = SESSION + ".pull('[net.get_weights(), [v.numpy() for v in opt.variables]]', worker={worker})"
SAME = ("all(np.array_equal(a, b) for a, b in zip(before[0] + before[1], after[0] + after[1])) "
        "and len(after[1]) == len(before[1])")
NODES = f"[p['node_id'] for p in {SESSION}.backend.placements]"


def test_a_save_reaches_a_new_worker_on_a_node_that_could_not_read_it(kernel, ray_cluster):
    node_dirs = Path(tempfile.gettempdir()) / f"nbworkers-ray-{os.getuid()}"  # private to this user (private_dirs)
    forced = kernel.run("import numpy as np\nimport nbworkers.magics.backends.ray.backend as rb\n"
                        "rb.log_probe = lambda path: (-1, b'')")  # no node sees the kernel's files
    assert not forced.error, forced.error
    try:
        flags = f"-n 2 --backend ray --address {ray_cluster.address} "
        built = kernel.run(BUILD.format(flags=flags), timeout=WORKERS_UP_TIMEOUT + 120)
        assert not built.error and built.status == "ok", built.text
        trained = kernel.run(TRAIN)
        assert not trained.error, trained.text
        assert not kernel.run(f"before = {STATE.format(worker=0)}").error
        assert kernel.value("int(before[1][0])") == 6  # the optimizer's iterations, then its slots
        # worker 1 raises between steps and holds the save (worker 0, aborted inside the all-reduce, does not: its
        # optimizer may be a step ahead of its weights): worker 1's node is the only one whose directory holds it
        saved_on = kernel.value(NODES)[1]

        failed = kernel.run(RAISE_ON_ONE, timeout=240)
        assert failed.status == "error" and "worker 1: ValueError: only worker 1 fails" in failed.error, failed.text
        assert "- kept: worker 1 saved net (Keras model: " in failed.error, failed.error
        assert "opt (Adam: " in failed.error and "(iterations 6)" in failed.error, failed.error
        for cpp in ("StartAbort", "ring_alg.cc", "Aborting RingReduce", "E0000"):  # in the workers' logs only
            assert cpp not in failed.text, failed.text

        rebuilt = kernel.run(BUILD.format(flags=""), timeout=WORKERS_UP_TIMEOUT + 120)  # re-running cell 1 is all
        assert not rebuilt.error, rebuilt.text
        run_dir = Path(kernel.value(f"str({SESSION}.run_dir)"))  # the kernel took the save back before the restart
        kept = run_dir / "session-state" / "gen-0" / "worker-1"
        assert (kept / "manifest.json").is_file() and list(kept.glob("opt.data-*")), "the kernel keeps the save"
        nodes = kernel.value(NODES)
        elsewhere = [w for w, node in enumerate(nodes) if node != saved_on]
        assert elsewhere, (nodes, saved_on)  # two workers, one node had the save: at least one is on another
        for worker in (0, 1):
            assert not kernel.run(f"after = {STATE.format(worker=worker)}").error
            assert kernel.value(SAME), worker  # weights, iterations and slots exactly as before the error
        log = kernel.value(f"{SESSION}.logs({elsewhere[0]})")
        assert "gen-0/worker-1" in log and "copied to this node" in log, log[-3000:]
        assert kernel.value(f"int({SESSION}.pull('int(opt.iterations.numpy())', worker={elsewhere[0]}))") == 6
        assert not kernel.run(f"%workers stop {NAME}").error
    finally:
        for path in node_dirs.glob(f"{NAME}-*"):
            shutil.rmtree(path, ignore_errors=True)
        try:
            node_dirs.rmdir()  # only when empty: another run may use it
        except OSError:
            pass
