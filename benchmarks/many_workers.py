"""Many workers (``--only many``): the kernel with 64 simulated workers sending metrics and logs at a real pace.

A real ``Cluster`` in the benchmark's real kernel, its widget view shown, with a ``SimulatedBackend``
(``simulated_workers.py``): one process sends as N workers through the real relay with the workers' own
``wire.Sender`` (metrics every 0.25 s, a progress-bar redraw every 0.05 s, per worker), after a backlog of
1900 metric messages each (a run that has gone on for a while: full histories). Measured while it runs:

- the kernel process's CPU (all its threads: relay, supervisor, widget updates, IOPub), as a share of one core;
- the widget's updates a second and the bytes they carry (the comm messages the kernel sends);
- a trivial cell's round trip (``1 + 1``, sent every 0.5 s from here): the notebook stays usable.

The same for 2 workers is the baseline, side by side; the kernel idle, too.
"""

from __future__ import annotations

import statistics
import time

import psutil
from harness import HERE, BenchKernel, log, percentile

from nbworkers.kernel_driver import wait_until

TARGET_CELL_S = 0.2  # a trivial cell answers within this while 64 workers run
TARGET_UPDATES = 4.0  # per second at most (flush_interval)
BACKLOG = 1900  # metric messages per worker sent first: the kernel keeps 2000 per worker

SETUP = """
import sys as _sys, json as _json, time as _time
_sys.path.insert(0, {here!r})
from simulated_workers import SimulatedBackend
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.run.cluster import Cluster
_c = Cluster(LaunchSpec(code="# simulated", workers={workers}, name={name!r}, cwd={cwd!r}),
             backend=SimulatedBackend(seconds=600, backlog={backlog}))
_c.start()
_view = _c.show()
_sent = []  # (time, bytes) of every comm message the widget sent
_send = _view.widget.comm.send
def _counted(data=None, metadata=None, buffers=None, _send=_send):
    _sent.append((_time.time(), len(_json.dumps(data, default=str))))
    return _send(data=data, metadata=metadata, buffers=buffers)
_view.widget.comm.send = _counted
"""


def _measure(kernel: BenchKernel, tmp, workers: int, seconds: float, backlog: int) -> dict:
    name = f"many{workers}"
    kernel.output(SETUP.format(here=str(HERE), workers=workers, name=name, cwd=str(tmp), backlog=backlog))
    # the backlog absorbed: every worker's history is full
    wait_until(lambda: kernel.value(f"min(len(w.history) for w in _c.state.workers) >= {min(backlog, 1990)}"
                                    " or _c.done"), 300, interval=1.0)
    proc = psutil.Process(kernel.pid)
    cpu0, t0 = sum(proc.cpu_times()[:2]), time.time()
    latencies = []
    while time.time() - t0 < seconds:
        started = time.perf_counter()
        kernel.value("1 + 1")
        latencies.append(time.perf_counter() - started)
        time.sleep(max(0.0, 0.5 - (time.perf_counter() - started)))
    cpu1, t1 = sum(proc.cpu_times()[:2]), time.time()
    sent = kernel.value(f"[(t, n) for t, n in _sent if {t0} <= t <= {t1}]")
    state = kernel.value("dict(status=_c.status, drops=_c.snapshot()['dropped'], "
                         "steps=min(w.step or 0 for w in _c.state.workers))")
    kernel.output("_c.stop()\n_c.wait(60)\n_view.close()")
    sizes = [n for _, n in sent]
    result = {
        "workers": workers,
        "cpu": (cpu1 - cpu0) / (t1 - t0),
        "updates_per_s": len(sent) / (t1 - t0),
        "bytes_per_s": sum(sizes) / (t1 - t0),
        "update_kb_median": statistics.median(sizes) / 1024 if sizes else 0.0,
        "cell_p50": percentile(latencies, 50),
        "cell_p99": percentile(latencies, 99),
        "cell_max": max(latencies),
        "cells": len(latencies),
        "status": state["status"],
        "drops": state["drops"],
    }
    log(f"many workers: {workers} workers: kernel CPU {result['cpu'] * 100:.0f} %, {result['updates_per_s']:.1f} "
        f"updates/s, {result['bytes_per_s'] / 1024:.0f} kB/s, trivial cell p50 {result['cell_p50'] * 1000:.0f} ms "
        f"p99 {result['cell_p99'] * 1000:.0f} ms max {result['cell_max'] * 1000:.0f} ms; {state}")
    return result


def bench(kernel: BenchKernel, tmp, sizes: tuple[int, ...] = (2, 64), seconds: float = 20.0,
          backlog: int = BACKLOG) -> dict:
    proc = psutil.Process(kernel.pid)
    cpu0, t0 = sum(proc.cpu_times()[:2]), time.time()
    time.sleep(3.0)
    idle = (sum(proc.cpu_times()[:2]) - cpu0) / (time.time() - t0)
    return {"idle_cpu": idle, "runs": [_measure(kernel, tmp, n, seconds, backlog) for n in sizes]}


def rows(result: dict) -> list[tuple[str, str, str, str]]:
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    out = [("kernel CPU, idle (share of one core)", f"{result['idle_cpu'] * 100:.1f} %", "", "")]
    base = result["runs"][0]
    for run in result["runs"]:
        n = run["workers"]
        ratio = "baseline" if run is base else f"{run['cpu'] / max(base['cpu'], 1e-9):.1f}x {base['workers']} workers"
        out += [
            (f"{n} simulated workers: kernel CPU (share of one core)", f"{run['cpu'] * 100:.1f} %", ratio, ""),
            (f"{n} simulated workers: widget updates / data sent", f"{run['updates_per_s']:.1f}/s, "
             f"{run['bytes_per_s'] / 1024:.0f} kB/s", f"{run['update_kb_median']:.1f} kB each",
             f"<= {TARGET_UPDATES:g}/s: {verdict(run['updates_per_s'] <= TARGET_UPDATES + 0.5)}"),
            (f"{n} simulated workers: a trivial cell's round trip, p50 / p99 / max",
             f"{run['cell_p50'] * 1000:.0f} / {run['cell_p99'] * 1000:.0f} / {run['cell_max'] * 1000:.0f} ms",
             f"{run['cells']} cells", f"< {TARGET_CELL_S:g} s: {verdict(run['cell_max'] < TARGET_CELL_S)}"),
        ]
    return out
