"""Shared by the benchmarks (``benchmarks/run.py`` and the sections it calls): paths, the kernel, the two launches.

- ``BenchKernel``: a real IPython kernel through jupyter_client with nbworkers loaded;
- ``hand_launch``: the TensorFlow tutorial's way (``TF_CONFIG`` set, ``python main.py &``), seconds to the first step;
- ``nbworkers_launch``: a ``%%worker`` cell in a ``BenchKernel``, seconds to the first step of every worker;
- ``first_steps`` / ``wait_first_steps``: the ``FIRST_STEP`` line ``workload.py`` prints after its first step.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from nbworkers.kernel_driver import KernelDriver
from nbworkers.magics.launch.ports import pick_free_ports

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workload.py"
PY = sys.executable
FIRST_STEP = re.compile(r"^FIRST_STEP (\d+\.\d+)", re.M)
RUN_TIMEOUT = 300.0  # seconds any single run may take before the benchmark gives up on it
POLL = 0.02  # seconds between looks at log files


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def percentile(values, q: float):
    values = sorted(values)
    if not values:
        return None
    k = min(len(values) - 1, max(0, int(round(q / 100 * (len(values) - 1)))))
    return values[k]


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "NBWORKERS_"))}
    env.pop("TF_CONFIG", None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONUNBUFFERED"] = "1"
    return env


# ----------------------------------------------------------------------------------------------- the kernel
class BenchKernel(KernelDriver):
    """A real IPython kernel (this interpreter's ipykernel) with nbworkers loaded (nbworkers.kernel_driver)."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        super().__init__(cwd, env, python=PY, ready_timeout=120)
        self.output("%load_ext nbworkers\nimport nbworkers")

    def rss_mb(self) -> float:
        return psutil.Process(self.pid).memory_info().rss / 2**20


# ----------------------------------------------------------------------------------------------- helpers
def first_steps(paths: list[Path], after: str | None = None) -> list[float | None]:
    """The FIRST_STEP time in each log (after the last line containing ``after``, when given)."""
    found = []
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            found.append(None)
            continue
        if after is not None:
            at = text.rfind(after)
            if at < 0:
                found.append(None)
                continue
            text = text[at:]
        match = FIRST_STEP.search(text)
        found.append(float(match.group(1)) if match else None)
    return found


def wait_first_steps(paths: list[Path], timeout: float = RUN_TIMEOUT, after: str | None = None,
                     on_wait=None) -> list[float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = first_steps(paths, after)
        if all(s is not None for s in steps):
            return steps
        if on_wait is not None:
            on_wait()
        time.sleep(POLL)
    tails = "\n".join(f"--- {p}:\n" + (p.read_text(errors="replace")[-1500:] if p.exists() else "(none)")
                      for p in paths)
    raise TimeoutError(f"no first training step within {timeout} s\n{tails}")


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def hand_launch(workers: int, workdir: Path, env: dict[str, str]) -> float:
    """The tutorial's way: TF_CONFIG per worker, `python main.py &> job_i.log`. Seconds to the first step."""
    for old in workdir.glob("job_*.log"):
        old.unlink()
    ports = pick_free_ports(workers)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    procs, paths = [], []
    t0 = time.time()
    for i in range(workers):
        path = workdir / f"job_{i}.log"
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
        with open(path, "wb") as out:
            procs.append(subprocess.Popen(
                [PY, str(WORKLOAD)], stdout=out, stderr=subprocess.STDOUT, cwd=workdir,
                env={**env, "TF_USE_LEGACY_KERAS": "1", "TF_CONFIG": tf_config}, start_new_session=True,
            ))
        paths.append(path)
    try:
        steps = wait_first_steps(paths)
        for proc in procs:
            proc.wait(timeout=RUN_TIMEOUT)
    finally:
        for proc in procs:
            kill_group(proc)
    return max(steps) - t0


def worker_cell(workers: int, name: str, extra: str = "") -> str:
    return f"%%worker -n {workers} --name {name} --env TF_USE_LEGACY_KERAS=1 {extra}\n" + WORKLOAD.read_text()


def nbworkers_launch(kernel: BenchKernel, workers: int, name: str, run_root: Path,
                     rss: list[float]) -> tuple[float, int]:
    """Seconds from executing the cell to the first step of every worker; and how many were forked from a zygote."""
    paths = [run_root / name / f"worker-{i}.log" for i in range(workers)]
    cell = worker_cell(workers, name)
    t0 = time.time()
    msg_id = kernel.send(cell)
    error = kernel.collect(msg_id, RUN_TIMEOUT).error_line
    if error:
        raise RuntimeError(f"%%worker failed: {error}")
    steps = wait_first_steps(paths)
    rss.append(kernel.rss_mb())  # a cluster is running
    kernel.output(f"%workers wait {name} --timeout {RUN_TIMEOUT:g}")
    status = kernel.value(f"nbworkers.get_cluster({name!r}).status")
    if status != "finished":
        raise RuntimeError(f"cluster {name} ended {status}: "
                           + kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()['error']"))
    forked = sum("--- nbworkers: forked from zygote" in p.read_text(errors="replace") for p in paths)
    return max(steps) - t0, forked
