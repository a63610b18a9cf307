"""Relay (``--only relay``): what the kernel absorbs from two busy workers, and report()'s latency to the view."""

from __future__ import annotations

import json
from pathlib import Path

from harness import RUN_TIMEOUT, BenchKernel, log, percentile

INGEST_CELL = """%%worker -n 2 --name {name}
import os, sys, time
while not os.path.exists({gate!r}):
    time.sleep(0.005)
chunk = "".join(f"{{'x' * 60}} {{i}}\\n" for i in range(10000))
for _ in range({lines} // 10000):
    sys.stdout.write(chunk)
sys.stdout.flush()
from nbworkers.protocol import wire
sender = wire.process_sender()
for i in range({metrics}):
    while not sender.send("metrics", metrics={{"loss": 1.0 / (i + 1)}}, step=i):
        time.sleep(0.001)
# stay up until the kernel has counted everything: a closing sender drops what is still queued after 2 s
end = time.time() + 300
while not os.path.exists({gate!r} + ".done") and time.time() < end:
    time.sleep(0.01)
"""

INGEST_MEASURE = """
import pathlib as _pl, time as _time
_c = nbworkers.get_cluster({name!r})
_view = _c.show()
_updates = []
_update = _view.update
def _counted(snapshot, _update=_update):
    _updates.append(_time.time())
    _update(snapshot)
_view.update = _counted
_pl.Path({gate!r}).write_text("go")
_t0 = _time.time()
while sum(w.log_tail.total for w in _c.state.workers) < {total} and _time.time() - _t0 < 120:
    _time.sleep(0.002)
_t1 = _time.time()
_lines = sum(w.log_tail.total for w in _c.state.workers)
while min(-1 if w.step is None else w.step for w in _c.state.workers) < {metrics} - 1 and _time.time() - _t1 < 120:
    _time.sleep(0.002)
_t2 = _time.time()
_steps = [w.step for w in _c.state.workers]
_pl.Path({gate!r} + ".done").write_text("done")
_c.wait({timeout})
_ingest = dict(t0=_t0, t1=_t1, t2=_t2, lines=_lines, updates=_updates, status=_c.status, steps=_steps,
               drops=_c.snapshot()['dropped'])
"""

LATENCY_CELL = """%%worker -n 1 --name {name}
import json, os, time
from nbworkers.distlib import report, flush_reports
while not os.path.exists({gate!r}):
    time.sleep(0.005)
times = []
end = time.time() + {seconds}
step = 0
while time.time() < end:
    now = time.time()
    report(step=step, t_report=now, loss=1.0 / (step + 1))
    times.append(now)
    step += 1
    time.sleep({period})
flush_reports()
with open({out!r}, "w") as file:
    json.dump(times, file)
"""

LATENCY_MEASURE = """
import pathlib as _pl, time as _time
_c = nbworkers.get_cluster({name!r})
_view = _c.show()
_shown, _applied = [], []
_update = _view.update
def _counted(snapshot, _update=_update):
    _shown.append((_time.time(), snapshot["workers"][0]["metrics"].get("t_report")))
    _update(snapshot)
_view.update = _counted
_apply = _c._loop._take  # the run loop takes each relay message here (magics/run/loop.py)
def _timed_apply(message, _apply=_apply):
    _apply(message)
    if message.kind == "metrics":
        _applied.append((_time.time(), message.content["metrics"].get("t_report")))
_c._loop._take = _timed_apply
_pl.Path({gate!r}).write_text("go")
_c.wait({timeout})
_latency = dict(shown=_shown, applied=_applied, status=_c.status)
"""


def max_per_second(times: list[float]) -> int:
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] < t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


def bench_relay(kernel: BenchKernel, tmp: Path, lines: int, metrics: int, seconds: float) -> dict:
    gate = tmp / "ingest-gate"
    kernel.output(INGEST_CELL.format(name="ingest", gate=str(gate), lines=lines, metrics=metrics))
    kernel.output(INGEST_MEASURE.format(name="ingest", gate=str(gate), total=2 * lines, metrics=metrics,
                                        timeout=RUN_TIMEOUT))
    data = kernel.value("{k: v for k, v in _ingest.items()}")
    updates = [t for t in data["updates"] if data["t0"] <= t <= data["t2"]]
    lines_s = data["lines"] / (data["t1"] - data["t0"])
    metrics_s = sum(1 + (s or 0) for s in data["steps"]) / (data["t2"] - data["t1"])
    if data["lines"] < 2 * lines or any(s != metrics - 1 for s in data["steps"]):
        log(f"relay: not everything arrived: {data['lines']} of {2 * lines} lines, last steps {data['steps']}, "
            f"drops {data['drops']}")
    log(f"relay: {lines_s:,.0f} log lines/s, {metrics_s:,.0f} metric messages/s, "
        f"{max_per_second(updates)} view updates in the busiest second")

    gate = tmp / "latency-gate"
    out = tmp / "report-times.json"
    kernel.output(LATENCY_CELL.format(name="latency", gate=str(gate), seconds=seconds, period=0.01, out=str(out)))
    kernel.output(LATENCY_MEASURE.format(name="latency", gate=str(gate), timeout=RUN_TIMEOUT))
    lat = kernel.value("_latency")
    calls = json.loads(out.read_text())
    shown = [(t, v) for t, v in lat["shown"] if v is not None]
    applied = [(t, v) for t, v in lat["applied"] if v is not None]

    def staleness(observed):
        """For every report() call: seconds until the kernel showed it or a newer one."""
        result, j = [], 0
        for call in calls:
            while j < len(observed) and observed[j][1] < call:
                j += 1
            if j < len(observed):
                result.append(observed[j][0] - call)
        return result

    to_view = staleness(shown)
    to_state = staleness(applied)
    transport = [t - v for t, v in applied]
    result = {
        "lines_per_s": lines_s,
        "metrics_per_s": metrics_s,
        "updates_max_per_s": max_per_second(updates),
        "updates_mean_per_s": len(updates) / max(1e-9, data["t2"] - data["t0"]),
        "lines_sent": 2 * lines,
        "lines_absorbed": data["lines"],
        "drops": data["drops"],
        "report_calls": len(calls),
        "view_p50": percentile(to_view, 50), "view_p99": percentile(to_view, 99),
        "state_p50": percentile(to_state, 50), "state_p99": percentile(to_state, 99),
        "transport_p50": percentile(transport, 50), "transport_p99": percentile(transport, 99),
        "messages_applied": len(applied),
    }
    log(f"latency: report() -> view p50 {result['view_p50']:.3f} s p99 {result['view_p99']:.3f} s; "
        f"-> kernel state p50 {result['state_p50']:.3f} p99 {result['state_p99']:.3f}; "
        f"send -> state p50 {result['transport_p50'] * 1000:.1f} ms p99 {result['transport_p99'] * 1000:.1f} ms")
    return result
