"""A fake run of many workers for the widget's compact view (no TensorFlow, no processes): importable in kernels.

``ManyWorkersRun(workers=32)`` is a ``FakeCluster`` (browser_helpers.py) whose workers differ the way a real
large run's do: most train in step with small noise, one is a straggler (slower), one diverges (its loss drifts
up: an outlier), one logs a warning, and every worker reports the same global ``lr`` (a metric shown once). Its
thread drives the real ``ClusterWidgetView`` through ``update()`` every interval, as the supervisor does.
"""

from __future__ import annotations

import math
import random
import time

from browser_helpers import FakeCluster

STRAGGLER = 5  # trains at 60 % of the others' pace
DIVERGING = 11  # its loss climbs away from the band
WARNING = 23  # logs a warning once (flagged: its log is sent with the chief's)


class ManyWorkersRun(FakeCluster):
    def __init__(self, name: str = "many", workers: int = 32, epochs: int = 5, steps: int = 100,
                 step_time: float = 0.05, start_at: float = 0.0, interval: float = 0.25):
        super().__init__(name=name, workers=workers, epochs=epochs, steps=steps, step_time=step_time,
                         interval=interval, run_dir=f"/tmp/nbworkers-{name}")
        self.start_at = start_at  # fraction of the run already done when the thread starts (a mid-run picture)
        self.clock = time.time() - 1e4  # the run's clock: the chief's steps, step_time apart (steps/s as if real)
        self._random = random.Random(7)
        for w in self.state.workers:
            w.host = f"node-{w.index // 8}"

    def _pace(self, index: int) -> float:
        return 0.6 if index == STRAGGLER else 1.0 - 0.02 * (index % 5) / 5

    def _advance(self, global_step: float) -> None:
        """Every worker to its share of ``global_step`` (the chief's), with metrics and a log line."""
        total = self.epochs * self.steps
        for w in self.state.workers:
            mine = min(total, int(global_step * self._pace(w.index)))
            if w.history and w.history[-1][0] >= mine:
                continue
            epoch, step = divmod(max(mine - 1, 0), self.steps)
            noise = self._random.gauss(0, 0.015)
            loss = 1.8 * math.exp(-mine / (total / 3)) + 0.12 + noise
            if w.index == DIVERGING and mine > total * 0.2:
                loss += 0.004 * (mine - total * 0.2)
            w.status = "running"
            w.apply_metrics({"epoch": epoch + 1, "epochs_total": self.epochs, "step": step + 1,
                             "steps_total": self.steps, "t": self.clock + global_step * self.step_time,
                             "metrics": {"loss": loss, "accuracy": min(0.99, 1 - loss / 2.2), "lr": 0.001}})
            w.log_tail.feed([f"\repoch {epoch + 1}/{self.epochs} step {step + 1}/{self.steps} loss={loss:.4f}\n"])
            if w.index == WARNING and mine == total // 10:
                w.log_tail.feed(["WARNING: input pipeline stalled for 2.1 s (prefetch buffer empty)\n"])

    def _run(self) -> None:
        total = self.epochs * self.steps
        with self._lock:
            self.state.status = "running"
            for w in self.state.workers:
                w.log_tail.feed([f"worker {w.index} on node-{w.index // 8}: starting\n"])
            start = int(total * self.start_at)
            for g in range(0, start + 1, max(1, start // 200)):  # the history up to the starting point
                self._advance(g)
        global_step = float(start)
        last_flush = 0.0
        outcome = "finished"
        while global_step * self._pace(STRAGGLER) < total + 1:  # until the slowest worker is through
            if self._stop.is_set():
                outcome = "stopped"
                break
            with self._lock:
                self._advance(global_step)
            global_step += 1
            if time.monotonic() - last_flush >= self.interval:
                self._flush()
                last_flush = time.monotonic()
            self._sleep(self.step_time)
        with self._lock:
            for w in self.state.workers:
                w.status = outcome
                w.log_tail.feed([f"worker {w.index} {outcome}\n"])
            self.state.status = outcome
            self.state.ended = time.time()
        snapshot = self.snapshot()
        for view in list(self.views):
            view.finish(snapshot)
        self.done.set()
