"""Run real 2-worker TensorFlow clusters for the distlib tests (no %%worker magic involved).

Each worker is a fresh interpreter running the real worker bootstrap (``python -m
nbworkers.distlib.worker.bootstrap``) with its own TF_CONFIG on free localhost ports, the relay variables pointing
at a ``RelayReceiver`` in the test process, and its own session; the process groups are killed at the end.
Worker scripts print ``RESULT <json>`` lines that the tests read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbworkers.magics.launch.ports import pick_free_ports as free_ports
from nbworkers.magics.run.relay import Message, RelayReceiver
from nbworkers.protocol import wire

REPO = Path(__file__).resolve().parents[1]
MAIN_PYTHON = sys.executable
TF215_PYTHON = REPO / ".venv-tf215" / "bin" / "python"
CLUSTER_TIMEOUT_S = 240.0  # a whole tiny training run on 2 shared cores
RELAY_POLL_S = 0.2  # how long one relay poll waits while the workers run
KILL_GRACE_S = 5.0  # between SIGTERM and SIGKILL of a worker group


def tf_config(ports: list[int], index: int) -> str:
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": index}})


@dataclass
class ClusterRun:
    returncodes: list[int | None]
    outputs: list[str]
    messages: list[Message] = field(default_factory=list)

    def results(self, worker: int) -> list[dict[str, Any]]:
        """The ``RESULT {...}`` objects worker ``worker`` printed, in order."""
        found = []
        for line in self.outputs[worker].splitlines():
            if line.startswith("RESULT "):
                found.append(json.loads(line[len("RESULT "):]))
        return found

    def result(self, worker: int) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for item in self.results(worker):
            merged.update(item)
        return merged

    def metrics(self, worker: int) -> list[dict[str, Any]]:
        return [m.content for m in self.messages if m.kind == "metrics" and m.content["worker"] == worker]

    def states(self, worker: int) -> list[str]:
        return [m.content["state"] for m in self.messages if m.kind == "status" and m.content["worker"] == worker]

    def startup_warnings(self) -> list[str]:
        """Lines where distlib's startup hooks fell back to upstream behaviour (should never happen here)."""
        markers = ("nbworkers: post-import hook", "nbworkers: could not set up collectives early")
        return [line for out in self.outputs for line in out.splitlines() if line.startswith(markers)]

    def describe(self) -> str:
        tails = "\n".join(f"--- worker {i} (rc={rc}) ---\n{out[-4000:]}" for i, (rc, out) in enumerate(zip(self.returncodes, self.outputs)))
        return f"returncodes {self.returncodes}\n{tails}"


def kill_group(process: subprocess.Popen, grace_s: float = KILL_GRACE_S) -> None:
    """TERM, ``grace_s``, KILL (``grace_s`` 0: KILL at once, as a crash)."""
    steps = ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_GRACE_S)) if grace_s > 0 else ((signal.SIGKILL, KILL_GRACE_S),)
    for sig, wait_s in steps:
        if process.poll() is not None:
            break
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
    try:  # whatever the worker left behind in its group
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_cluster(
    code: str,
    workdir: Path,
    *,
    workers: int = 2,
    python: str | os.PathLike = MAIN_PYTHON,
    env: dict[str, str] | None = None,
    per_worker_env: list[dict[str, str]] | None = None,
    timeout_s: float = CLUSTER_TIMEOUT_S,
    kill_when: Any = None,
) -> ClusterRun:
    """Run ``code`` as a cell on ``workers`` workers and wait for them (or until ``kill_when(run)`` is true,
    then kill them, as a crash would)."""
    workdir.mkdir(parents=True, exist_ok=True)
    code_path = workdir / "cell.py"
    code_path.write_text(textwrap.dedent(code))
    key = wire.new_key()
    receiver = RelayReceiver(key)
    ports = free_ports(workers)
    processes: list[subprocess.Popen] = []
    logs = [workdir / f"worker{i}.log" for i in range(workers)]
    run = ClusterRun([None] * workers, [""] * workers)
    crashed = False
    try:
        for index in range(workers):
            worker_env = {
                **os.environ,
                "TF_CONFIG": tf_config(ports, index),
                "TF_CPP_MIN_LOG_LEVEL": "2",
                "PYTHONUNBUFFERED": "1",
                wire.ENV_RELAY: receiver.address,
                wire.ENV_KEY: key,
                wire.ENV_WORKER: str(index),
                wire.ENV_GENERATION: "0",
                wire.ENV_CODE: str(code_path),
                wire.ENV_CWD: str(workdir),
                wire.ENV_RUN_DIR: str(workdir),
                **(env or {}),
                **((per_worker_env or [{}] * workers)[index]),
            }
            with open(logs[index], "w") as log:
                processes.append(
                    subprocess.Popen(
                        [str(python), "-m", "nbworkers.distlib.worker.bootstrap"],
                        env=worker_env,
                        cwd=workdir,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            run.messages.extend(receiver.poll(RELAY_POLL_S))
            if all(p.poll() is not None for p in processes):
                break
            if kill_when is not None:
                run.outputs = [path.read_text(errors="replace") for path in logs]
                if kill_when(run):
                    crashed = True
                    break
        run.messages.extend(receiver.poll(RELAY_POLL_S))
    finally:
        for process in processes:
            kill_group(process, grace_s=0 if crashed else KILL_GRACE_S)
        receiver.close()
    run.returncodes = [p.returncode for p in processes]
    run.outputs = [path.read_text(errors="replace") for path in logs]
    return run
