"""The session tests' shared parts: the cells that build and train a 2-worker session's model, and the kernel
that runs them (tests/integration/test_sessions.py, test_sessions_saved_state.py)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator

from conftest import Kernel, kill_leftovers, processes_of_run_root, wait_until

BUILD = """%%worker -n 2 --session train --block
import base64
import os
import numpy as np
import tensorflow as tf
import keras
from nbworkers import distlib

strategy = distlib.strategy()
rng = np.random.default_rng(int(os.environ["NBWORKERS_WORKER"]))  # different data on each worker
x = rng.normal(size=(512, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
with strategy.scope():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    step_size = tf.Variable(0.5)
built_in_cell = 1
"""
TRAIN = """%%worker --session train --block
history = distlib.fit(model, dataset, epochs=2, steps_per_epoch=8, verbose=0)
print("TRAINED", len(history.history["loss"]))
"""
RAISE_ON_ONE = """%%worker --session train --block
if os.environ["NBWORKERS_WORKER"] == "1":
    raise ValueError("only worker 1 fails")
distlib.fit(model, dataset, epochs=5, steps_per_epoch=50, verbose=0)  # worker 0 waits in the all-reduce
"""


@contextlib.contextmanager
def session_kernel_in(base: Path) -> Iterator[Kernel]:
    """A real kernel with nbworkers loaded (numpy as np), its runs under ``base/runs`` (``kernel.run_root``); shut
    down at the end of the block, then checks that no session process outlived it."""
    run_root = base / "runs"
    run_root.mkdir()
    notebook = base / "notebook"
    notebook.mkdir()
    env = dict(os.environ)
    env.update({"NBWORKERS_RUN_ROOT": str(run_root), "TF_CPP_MIN_LOG_LEVEL": "2",
                "NBWORKERS_ZYGOTE_PREWARM": "0"})  # workers forked from a zygote the first session starts
    env.pop("TF_CONFIG", None)
    kernel = Kernel(notebook, env, kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    kernel.run_root = run_root
    try:
        loaded = kernel.run("%load_ext nbworkers\nimport nbworkers\nimport numpy as np")
        assert not loaded.error, loaded.error
        yield kernel
    finally:
        kernel.shutdown()
    gone = wait_until(lambda: not processes_of_run_root(run_root, zygotes=True), 20)
    left = kill_leftovers(run_root)
    assert gone, f"session processes outlived the kernel: {left}"


def cell_log(kernel, number: int, worker: int) -> list[str]:
    return kernel.value(f"nbworkers.session('train').cells[{number - 1}].snapshot()['workers'][{worker}]['log_tail']")
