"""distlib stays light in a fresh interpreter: importing it and the startup hook imports no TensorFlow, and
the launcher's GPU-count check stops distlib.strategy() before TensorFlow starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from nbworkers.distlib import collectives
from nbworkers.protocol import wire

SUBPROCESS_TIMEOUT_S = 60
TWO_WORKERS = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}


def tf_config(cluster_spec, task_type="worker", index=0) -> dict[str, str]:
    return {"TF_CONFIG": json.dumps({"cluster": cluster_spec, "task": {"type": task_type, "index": index}})}


def test_import_and_startup_hook_do_not_import_tensorflow(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        import nbworkers.distlib as distlib
        from nbworkers.distlib.worker import startup
        startup.before_user_code()
        distlib.task(); distlib.is_chief(); distlib.report(loss=1.0); distlib.ReportCallback()
        [getattr(distlib, name) for name in distlib.__all__]  # every public name loads without TensorFlow
        print("TF_LOADED", "tensorflow" in sys.modules, "KERAS_LOADED", "keras" in sys.modules)
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", wire.ENV_RELAY, wire.ENV_KEY)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=SUBPROCESS_TIMEOUT_S, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "TF_LOADED False KERAS_LOADED False" in out.stdout


def test_launcher_gpu_counts_stop_strategy_before_tensorflow_starts(tmp_path):
    """Mocked counts in NBWORKERS_GPU_COUNTS (what a launcher that assigned GPUs would set)."""
    code = textwrap.dedent(
        """
        import sys
        from nbworkers import distlib
        try:
            distlib.strategy()
        except distlib.GpuCountMismatchError as error:
            print("ERROR", error)
        print("TF_LOADED", "tensorflow" in sys.modules)
        """
    )
    env = {**os.environ, **tf_config(TWO_WORKERS), collectives.ENV_GPU_COUNTS: "2,1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=SUBPROCESS_TIMEOUT_S, cwd=tmp_path)
    assert "ERROR Workers see different numbers of GPUs (worker 0: 2, worker 1: 1" in out.stdout, out.stderr
    assert "TF_LOADED False" in out.stdout


def test_report_and_report_callback_under_keras_on_jax_import_no_tensorflow(tmp_path):
    """--framework jax: a Keras fit on JAX with distlib's ReportCallback and report() loads no TensorFlow (a cell that
    feeds numpy arrays never pays its import)."""
    code = textwrap.dedent(
        """
        import sys
        import numpy as np
        import keras
        from nbworkers import distlib
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(np.ones((32, 4), "float32"), np.ones((32, 2), "float32"), epochs=2, verbose=0,
                  callbacks=[distlib.ReportCallback()])
        distlib.report(step=1, loss=np.float32(0.5), flush=True)
        distlib.tensorboard_dir()
        print("BACKEND", keras.backend.backend(), "TF_LOADED", "tensorflow" in sys.modules)
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", wire.ENV_RELAY, wire.ENV_KEY)}
    env.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    # in a folder of its own: report()'s TensorBoard folder without a run directory is ./tensorboard (a `tensorboard`
    # folder in the checkout made ruff take tensorboard for a first-party package: test_lint failed in CI)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=SUBPROCESS_TIMEOUT_S, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "BACKEND jax TF_LOADED False" in out.stdout, out.stdout + out.stderr[-2000:]
