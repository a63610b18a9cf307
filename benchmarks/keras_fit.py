#!/usr/bin/env python
"""Training speed under MultiWorkerMirroredStrategy, 2 workers: Keras 3 ``model.fit`` (with nbworkers' fix,
``distlib/compat/keras3/mwms.py``) vs ``distlib.fit`` vs tf_keras ``model.fit`` (the baseline), side by side.

Each round launches the three ways one after the other (2 fresh worker processes each, ``TF_CONFIG`` on
free ports, distlib's worker start-up hooks on, as under ``%%worker``) on the same model (784-512-512-10,
Adam, ``ReportCallback`` off), the same generated data and global batch (2 x 128). Each worker times its
epochs from ``on_epoch_begin`` to ``on_epoch_end`` and skips the first (tracing); the figure is worker 0's
steps/s over the timed epochs. Ratios are taken per round against the tf_keras run of the same round, then
the median. ``python benchmarks/keras_fit.py [--quick]`` prints the rows; ``run.py`` calls ``bench()``.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from nbworkers.magics.launch.ports import pick_free_ports

PY = sys.executable
RUN_TIMEOUT = 600.0  # seconds one 2-worker training run may take before the benchmark gives up on it
MODES = ("tf_keras", "keras3_fit", "distlib_fit")
LABELS = {
    "tf_keras": "tf_keras model.fit",
    "keras3_fit": "Keras 3 model.fit (nbworkers' fix)",
    "distlib_fit": "Keras 3 distlib.fit",
}

WORKLOAD = textwrap.dedent('''
    import json, os, sys, time
    MODE, STEPS, EPOCHS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    from nbworkers.distlib.worker import startup
    startup.before_user_code()  # what the worker bootstrap does under %%worker (installs compat/keras3/mwms)
    import numpy as np
    import tensorflow as tf
    if MODE == "tf_keras":
        keras = tf.keras  # TF_USE_LEGACY_KERAS=1 in this run's environment
    else:
        import keras
    from nbworkers import distlib

    rng = np.random.RandomState(0)
    x = rng.rand(4096, 784).astype("float32")
    y = rng.randint(0, 10, size=4096).astype("int64")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(128 * strategy.num_replicas_in_sync)
    with strategy.scope():
        model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(512, activation="relu"),
                                  keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), metrics=["accuracy"],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Clock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds = []

        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self.started)

    clock = Clock()
    if MODE == "distlib_fit":
        history = distlib.fit(model, dataset, epochs=EPOCHS, steps_per_epoch=STEPS, callbacks=[clock], verbose=0,
                              report=False)
    else:
        history = model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS, callbacks=[clock], verbose=0)
    timed = clock.seconds[1:]
    print("RESULT " + json.dumps({"steps_per_s": STEPS * len(timed) / sum(timed), "epoch_s": clock.seconds,
                                  "loss": history.history["loss"][-1]}), flush=True)
''')


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "NBWORKERS_"))}
    env.pop("TF_CONFIG", None)
    env.pop("TF_USE_LEGACY_KERAS", None)
    env.update({"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"})
    return env


def run_once(mode: str, steps: int, epochs: int, workdir: Path) -> dict:
    """One 2-worker training run of ``mode``; worker 0's result (steps/s over the epochs after the first)."""
    script = workdir / "keras_fit_workload.py"
    script.write_text(WORKLOAD)
    ports = pick_free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    env = _env()
    if mode == "tf_keras":
        env["TF_USE_LEGACY_KERAS"] = "1"
    procs, logs = [], []
    try:
        for index in range(2):
            log = workdir / f"{mode}-{index}.log"
            tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
            with open(log, "wb") as out:
                procs.append(subprocess.Popen([PY, str(script), mode, str(steps), str(epochs)], stdout=out,
                                              stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True,
                                              env={**env, "TF_CONFIG": tf_config}))
            logs.append(log)
        for proc in procs:
            proc.wait(timeout=RUN_TIMEOUT)
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    text = logs[0].read_text(errors="replace")
    line = next((entry for entry in text.splitlines() if entry.startswith("RESULT ")), None)
    if line is None or any(p.returncode for p in procs):
        raise RuntimeError(f"{mode} run failed (exit codes {[p.returncode for p in procs]}):\n{text[-3000:]}")
    return json.loads(line[len("RESULT "):])


def bench(rounds: int = 3, steps: int = 150, epochs: int = 3) -> dict:
    """Per mode: median steps/s and the median per-round ratio against tf_keras."""
    runs: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="nbworkers-keras-fit-") as tmp:
        for round_index in range(rounds):
            for mode in MODES:
                result = run_once(mode, steps, epochs, Path(tmp))
                runs[mode].append(result["steps_per_s"])
                _log(f"keras fit round {round_index + 1}/{rounds}: {LABELS[mode]} {result['steps_per_s']:.1f} steps/s "
                     f"(epochs {', '.join(f'{s:.2f}' for s in result['epoch_s'])} s)")
    summary = {"rounds": rounds, "steps": steps, "epochs": epochs, "runs": runs}
    for mode in MODES:
        ratios = [value / base for value, base in zip(runs[mode], runs["tf_keras"])]
        summary[mode] = {"steps_per_s": statistics.median(runs[mode]), "ratio": statistics.median(ratios),
                         "spread": (min(ratios), max(ratios))}
    versus_keras3 = [value / base for value, base in zip(runs["distlib_fit"], runs["keras3_fit"])]
    summary["distlib_fit"]["vs_keras3"] = statistics.median(versus_keras3)
    return summary


def rows(summary: dict) -> list[tuple[str, str, str, str]]:
    """Rows for run.py's table: (measure, median, vs baseline, note)."""
    out = []
    for mode in MODES:
        figure = summary[mode]
        vs = "baseline" if mode == "tf_keras" else f"{figure['ratio']:.2f}x tf_keras"
        note = "" if mode == "tf_keras" else f"per-round {figure['spread'][0]:.2f}-{figure['spread'][1]:.2f}"
        if mode == "distlib_fit":
            note += f"; {figure['vs_keras3']:.2f}x Keras 3 model.fit"
        out.append((f"training steps/s, 2 workers, 784-512-512-10, batch 2x128: {LABELS[mode]}",
                    f"{figure['steps_per_s']:.1f}", vs, note))
    return out


def main() -> int:
    quick = "--quick" in sys.argv[1:]
    summary = bench(rounds=1 if quick else 3, steps=60 if quick else 150, epochs=3)
    for row in rows(summary):
        print(" | ".join(row))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
