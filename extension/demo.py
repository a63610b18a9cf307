"""``python -m nbworkers.demo``: the quickstart's training, run through the extension in a real kernel.

It starts a real IPython kernel (jupyter_client), loads the extension (``%load_ext nbworkers``), runs the
quickstart tutorial's training cell (``tutorials/01_quickstart.ipynb``) with ``%%worker -n 2``, prints each
worker's progress about once a second (read from the cluster's snapshot in the kernel, as the widget does),
then the result: final loss and accuracy per worker and whether the workers ended with the same weights.

MNIST comes from ``tfds.testing.mock_data`` (``NBWORKERS_MOCK_DATA=1``) unless ``--real-data`` is given
(which downloads MNIST). Exits 0 when the run finished with the workers in sync, 1 otherwise; the kernel, its
workers and the temporary run directory are gone when it returns.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from nbworkers.kernel_driver import CellFailed, KernelDriver
from nbworkers.procs.strays import kill_strays, processes_under
from nbworkers.protocol import env_settings
from nbworkers.protocol.statuses import ClusterStatus, is_terminal

KERNEL_READY_TIMEOUT = 120.0  # seconds for the kernel to start and answer
CELL_TIMEOUT = 120.0  # seconds for one short cell in the kernel (loading the extension, a snapshot)
RUN_TIMEOUT = 900.0  # seconds for the whole training run (2 workers on a small, shared machine)
POLL_INTERVAL = 1.0  # seconds between progress lines
LEFTOVER_TIMEOUT = 20.0  # seconds for worker processes to be gone after the kernel shut down
CLUSTER_NAME = "quickstart"

# The quickstart tutorial's training cell (tests/unit/test_tutorials_files.py checks it is the notebook's, verbatim).
QUICKSTART_CELL = '''%%worker -n 2 --name quickstart
import os
import numpy as np
import keras
from nbworkers import distlib

MOCK = os.environ.get(distlib.ENV_MOCK_DATA) == "1"
PER_WORKER_BATCH = 64
EPOCHS, STEPS_PER_EPOCH = (3, 4) if MOCK else (3, 70)

strategy = distlib.strategy()  # MultiWorkerMirroredStrategy, from this worker's TF_CONFIG
global_batch = PER_WORKER_BATCH * strategy.num_replicas_in_sync
dataset = distlib.mnist("train").shuffle(1024, seed=1).repeat().batch(global_batch)  # sharded across workers

with strategy.scope():  # variables made here are mirrored on every worker
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

history = distlib.fit(model, dataset, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH)
print("LOSS", history.history["loss"][-1])
print("ACCURACY", history.history["accuracy"][-1])
print("CHECKSUM", float(sum(np.abs(w).astype("float64").sum() for w in model.get_weights())))'''

# Runs in the kernel: one JSON line with what the progress line shows.
PROGRESS_CODE = f"""
import json as _json, nbworkers as _nbw
_s = _nbw.get_cluster({CLUSTER_NAME!r}).snapshot()
print(_json.dumps({{"status": _s["status"], "wall_time": _s["wall_time"], "restarts": _s["restarts"],
    "error": _s["error"], "workers": [{{k: w[k] for k in ("index", "status", "epoch", "epochs_total", "step",
    "steps_total", "metrics", "pid")}} for w in _s["workers"]]}}))
"""

# Runs in the kernel: the TF_CONFIG each worker was started with (the first line of its log says).
TF_CONFIG_CODE = f"""
import json as _json, nbworkers as _nbw
_c = _nbw.get_cluster({CLUSTER_NAME!r})
print(_json.dumps([next((l.split("TF_CONFIG=", 1)[1] for l in _c.logs(i).splitlines() if "TF_CONFIG=" in l), None)
    for i in range(len(_c.snapshot()["workers"]))]))
"""

# Runs in the kernel after the run: what each worker printed as `TAG value`.
RESULT_CODE = f"""
import json as _json, re as _re, nbworkers as _nbw
_c = _nbw.get_cluster({CLUSTER_NAME!r})
print(_json.dumps([{{tag: (_re.findall(rf"^{{tag}} (\\S+)$", _c.logs(i), _re.M) or [None])[-1]
    for tag in ("LOSS", "ACCURACY", "CHECKSUM")}} for i in range(len(_c.snapshot()["workers"]))]))
"""


class DemoError(Exception):
    """The demo could not run or its result is wrong; the message says what happened."""


def _say(text: str) -> None:
    print(text, flush=True)


class DemoKernel(KernelDriver):
    """A real ipykernel subprocess (this interpreter's) and a blocking client (nbworkers.kernel_driver); its own
    output goes to ``kernel.log`` in ``cwd``."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        try:
            super().__init__(cwd, env, ready_timeout=KERNEL_READY_TIMEOUT, log_path=cwd / "kernel.log")
        except RuntimeError as error:
            raise DemoError(f"the kernel did not start within {KERNEL_READY_TIMEOUT:g} s: {error}\n"
                            f"{self.log_tail()}") from None

    def run(self, code: str, timeout: float = CELL_TIMEOUT) -> str:  # type: ignore[override]
        """Execute ``code``; return its stdout. Raises DemoError when the cell raised."""
        try:
            return self.output(code, timeout)
        except TimeoutError:
            raise DemoError(f"a kernel cell took longer than {timeout:g} s:\n{code[:300]}") from None
        except CellFailed as failed:
            raise DemoError(str(failed)) from None

    def json(self, code: str):
        lines = [line for line in self.run(code).splitlines() if line.strip()]
        return json.loads(lines[-1])

    def shutdown(self, now: bool = False) -> None:
        super().shutdown(now=now)


def _progress_line(snap: dict) -> str:
    parts = []
    for worker in snap["workers"]:
        where = []
        if worker.get("epoch") is not None:
            where.append(f"epoch {worker['epoch']}/{worker.get('epochs_total') or '?'}")
        if worker.get("step") is not None:
            where.append(f"step {worker['step']}/{worker.get('steps_total') or '?'}")
        metrics = " ".join(f"{k}={v:.4f}" for k, v in (worker.get("metrics") or {}).items()
                           if isinstance(v, (int, float)))
        parts.append(f"worker {worker['index']}: {worker['status']}" + "".join(f" {w}" for w in where)
                     + (f" {metrics}" if metrics else ""))
    restarts = f" (restarts: {snap['restarts']})" if snap.get("restarts") else ""
    return f"{snap['wall_time']:6.1f} s  {snap['status']}{restarts} | " + " | ".join(parts)


def _wait_for_no_processes(run_root: Path) -> list[int]:
    """Wait for the run's processes to go; kill the process groups of any that stay. Returns their pids."""
    deadline = time.monotonic() + LEFTOVER_TIMEOUT
    while time.monotonic() < deadline:
        if not processes_under(run_root):
            return []
        time.sleep(0.2)
    return kill_strays(run_root)


def run_demo(real_data: bool) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="nbworkers-demo-"))
    run_root = workdir / "runs"
    run_root.mkdir(mode=0o700)  # a run root only we can write to (the kernel checks it)
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env[env_settings.RUN_ROOT.name] = str(run_root)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if real_data:
        env.pop(env_settings.MOCK_DATA.name, None)
    else:
        env[env_settings.MOCK_DATA.name] = "1"
    kernel = None
    ok = False
    started = time.monotonic()
    try:
        _say("nbworkers demo: starting a kernel and loading the extension (%load_ext nbworkers)")
        kernel = DemoKernel(workdir, env)
        kernel.run("%load_ext nbworkers")
        data = "the real MNIST (tfds.load)" if real_data else "tfds mock data of MNIST's shape (NBWORKERS_MOCK_DATA=1)"
        _say(f"running the quickstart's training cell with %%worker -n 2 on {data}:")
        _say("\n".join("    " + line for line in QUICKSTART_CELL.splitlines()[:1])
             + "   (... the Keras model, distlib.fit)")
        kernel.run(QUICKSTART_CELL)  # returns at once: the workers train in the background
        for index, tf_config in enumerate(kernel.json(TF_CONFIG_CODE)):
            _say(f"  worker {index} started with TF_CONFIG={tf_config}")
        last_line = ""
        deadline = time.monotonic() + RUN_TIMEOUT
        while True:
            snap = kernel.json(PROGRESS_CODE)
            line = _progress_line(snap)
            if line.split("|", 1)[-1] != last_line.split("|", 1)[-1]:
                _say(line)
                last_line = line
            if is_terminal(snap["status"]):
                break
            if time.monotonic() > deadline:
                kernel.run(f"import nbworkers; nbworkers.get_cluster({CLUSTER_NAME!r}).stop()")
                raise DemoError(f"the run did not end within {RUN_TIMEOUT:g} s; it was stopped")
            time.sleep(POLL_INTERVAL)
        if snap["status"] != ClusterStatus.FINISHED:
            raise DemoError(f"the run {snap['status']}:\n{snap['error']}")
        results = kernel.json(RESULT_CODE)
        _say("result:")
        for index, result in enumerate(results):
            _say(f"  worker {index}: loss {result['LOSS']}, accuracy {result['ACCURACY']}, "
                 f"weight checksum {result['CHECKSUM']}")
        if any(r[key] is None for r in results for key in ("LOSS", "ACCURACY", "CHECKSUM")):
            raise DemoError("a worker did not print its result (see its log)")
        in_sync = len({r["CHECKSUM"] for r in results}) == 1
        _say(f"  workers in sync: {'yes' if in_sync else 'NO'} (the same weights on every worker)")
        if not in_sync:
            raise DemoError("the workers ended with different weights")
        losses = [float(r["LOSS"]) for r in results]
        if not all(0 < loss < 10 for loss in losses):
            raise DemoError(f"the final loss is out of range: {losses}")
        ok = True
    except DemoError as error:
        _say(f"nbworkers demo FAILED: {error}")
    except KeyboardInterrupt:
        _say("nbworkers demo interrupted")
    finally:
        if kernel is not None:
            kernel.shutdown()
        left = _wait_for_no_processes(run_root)
        if left:
            ok = False
            _say(f"nbworkers demo FAILED: worker processes outlived the kernel (killed them: {left})")
        shutil.rmtree(workdir, ignore_errors=True)
    if ok:
        _say(f"nbworkers demo OK in {time.monotonic() - started:.1f} s: 2 workers trained in sync, "
             "nothing left running")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbworkers.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--real-data", action="store_true",
                        help="train on the real MNIST (tfds downloads it) instead of tfds mock data")
    args = parser.parse_args(argv)
    return run_demo(real_data=args.real_data)


if __name__ == "__main__":
    sys.exit(main())
