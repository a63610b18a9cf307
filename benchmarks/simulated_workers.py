"""Many simulated workers in one process, sending through the real relay at a real worker's pace (no TensorFlow).

Two halves:

- run as a script (``python simulated_workers.py --workers 64 ...``, with the relay address, key and generation in
  the environment as ``%%worker`` sets them): one ``wire.Sender`` per simulated worker (the workers' own sender,
  signed as theirs are) sends ``hello``, ``status`` running, a ``metrics`` message every 0.25 s (``report()``'s
  throttle) and a log message every 0.05 s (the host's batch interval) holding a Keras progress-bar redraw (Keras
  redraws at most every 0.05 s), a full line at each epoch's end; one worker logs a warning. ``--backlog N`` first
  sends N metric messages per worker as fast as the relay takes them: the history of a run that has gone on for a
  while (the kernel keeps 2000 entries per worker). It runs until SIGTERM or ``--seconds``.
- ``SimulatedBackend``: a ``Backend`` (magics/shapes.py) for a real ``Cluster`` in a real kernel whose N workers
  are that one process: the relay, the supervisor, the state, the widget are the real ones.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

METRICS_INTERVAL = 0.25  # s: distlib report()'s default throttle (NBWORKERS_REPORT_INTERVAL)
LOG_INTERVAL = 0.05  # s: the worker host's batch interval, and Keras' progress-bar redraw interval
STEPS_PER_EPOCH = 200
WARNING_WORKER = 5


def simulate(workers: int, seconds: float, backlog: int, steps_per_s: float) -> None:
    from nbworkers.protocol import wire

    env = os.environ
    senders = [wire.Sender(env[wire.ENV_RELAY], env[wire.ENV_KEY], i, int(env.get(wire.ENV_GENERATION, "0")),
                           curve=None) for i in range(workers)]
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    for sender in senders:
        sender.send("hello", pid=os.getpid(), host="sim", role="worker", python=sys.executable)
        sender.send("status", state="running")

    def metrics(sender: Any, step: int) -> None:
        epoch, within = divmod(step, STEPS_PER_EPOCH)
        loss = 2.0 / (1 + step / 300) + 0.01 * (sender.worker % 7)
        while not sender.send("metrics", step=within + 1, epoch=epoch + 1, steps_total=STEPS_PER_EPOCH,
                              epochs_total=50, metrics={"loss": loss, "accuracy": 1 - loss / 2.5, "lr": 0.001}):
            time.sleep(0.001)  # the relay's queue is full: a real report() would drop; a backlog waits

    for step in range(backlog):
        for sender in senders:
            metrics(sender, step)
    start = time.monotonic()
    next_metrics = next_log = start
    step = backlog
    while not stopping and time.monotonic() - start < seconds:
        now = time.monotonic()
        step = backlog + int((now - start) * steps_per_s)
        if now >= next_log:
            within = step % STEPS_PER_EPOCH + 1
            bar = "=" * (within * 30 // STEPS_PER_EPOCH)
            for sender in senders:
                line = f"\r{within}/{STEPS_PER_EPOCH} [{bar:<30}] - ETA: 3s - loss: 0.{sender.worker:04d}"
                lines = [line + ("\n" if within == STEPS_PER_EPOCH else "")]
                if sender.worker == WARNING_WORKER and step % 400 == 0:
                    lines.append("\nWARNING: input pipeline stalled for 2.1 s\n")
                sender.send("log", lines=lines)
            next_log += LOG_INTERVAL
        if now >= next_metrics:
            for sender in senders:
                metrics(sender, step)
            next_metrics += METRICS_INTERVAL
        time.sleep(max(0.0, min(next_log, next_metrics) - time.monotonic()))
    for sender in senders:
        sender.send("status", state="stopped" if stopping else "finished")
        sender.close(linger_ms=2000)


class SimulatedHandle:
    """One simulated worker as the supervisor drives it: all of them share the simulator process."""

    def __init__(self, index: int, proc: subprocess.Popen, log_path: Path):
        self.index, self.proc, self.log_path = index, proc, log_path
        self.worker_pid: int | None = None

    @property
    def host(self) -> subprocess.Popen:
        return self.proc

    def poll(self) -> int | None:
        return self.proc.poll()

    def request_stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()

    def dump_stacks(self) -> None:
        pass

    def pgids(self) -> list[int]:
        return [self.proc.pid] if self.proc.poll() is None else []

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        pass


class SimulatedBackend:
    """N workers that are one ``simulated_workers.py`` process (started with worker 0's environment)."""

    name = "local"

    def __init__(self, seconds: float = 600.0, backlog: int = 0, steps_per_s: float = 10.0):
        self.seconds, self.backlog, self.steps_per_s = seconds, backlog, steps_per_s
        self.workers = 0
        self.proc: subprocess.Popen | None = None

    def relay_hosts(self) -> tuple[str, str | None]:
        return "127.0.0.1", None

    def plan(self, tasks: list, gpus_per_worker: int | None) -> list:
        from nbworkers.magics.backends.local import Placement

        self.workers = len(tasks)
        return [Placement("localhost", 1, "-1") for _ in tasks]  # no TensorFlow server: the port is never bound

    def launch(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path, grace: float,
               role: str = "worker") -> SimulatedHandle:
        if index == 0 or self.proc is None:
            command = [sys.executable, __file__, "--workers", str(self.workers), "--seconds", str(self.seconds),
                       "--backlog", str(self.backlog), "--steps-per-s", str(self.steps_per_s)]
            with open(log_path, "ab") as log:
                self.proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        return SimulatedHandle(index, self.proc, log_path)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--backlog", type=int, default=0)
    parser.add_argument("--steps-per-s", type=float, default=10.0)
    args = parser.parse_args()
    simulate(args.workers, args.seconds, args.backlog, args.steps_per_s)
