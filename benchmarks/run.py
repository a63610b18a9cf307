#!/usr/bin/env python
"""nbworkers benchmarks (``make bench``): prints a table and writes it to ``benchmarks/results.md``.

Every figure is a median over several runs; every comparison is a ratio against a baseline measured in the
same run, side by side (each repetition runs the baseline and nbworkers back to back, and the ratio is taken
per repetition before the median).

- start-up: time from executing a ``%%worker`` cell (real kernel through jupyter_client, no --block) to the
  first finished training step of every worker, vs the TensorFlow tutorial's hand launch of the same script
  (``TF_CONFIG`` set, ``python main.py &``); here every worker is spawned (zygotes off: ``benchmarks/zygote.py``
  measures forked starts, cold and warm);
- relay ingest: log lines/s and metric messages/s absorbed by the kernel's state, and how many view updates a
  second it sent meanwhile;
- latency from a worker's ``report()`` to the kernel's state and to the live view's update, p50/p99;
- cost of reporting: training steps/s with ``ReportCallback`` on vs off (one process, alternating fits), and
  the time spent inside ReportCallback's hooks as a share of the fits' time (the A/B comparison is limited by
  this shared machine's fit-to-fit noise; the share is not);
- recovery: ``kill -9`` of a worker to the first step of the restarted group;
- memory: the kernel's resident size with a cluster running (the kernel never imports TensorFlow).

``--quick`` runs each once with smaller loads (about two minutes). The machine is shared: the load average
before and after is written beside the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from nbworkers.kernel_driver import KernelDriver
from nbworkers.magics.ports import pick_free_ports
from nbworkers.magics.strays import processes_under

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workload.py"
REPORTING_COST = HERE / "reporting_cost.py"
RESULTS = HERE / "results.md"
PY = sys.executable
FIRST_STEP = re.compile(r"^FIRST_STEP (\d+\.\d+)", re.M)
RUN_TIMEOUT = 300.0  # seconds any single run may take before the benchmark gives up on it
POLL = 0.02  # seconds between looks at log files

# Targets from issue 10 (reported against, never asserted).
TARGET_COLD = 1.15
TARGET_LINES = 100_000
TARGET_P99 = 0.5
TARGET_COST = 0.02
TARGET_RECOVERY_SLACK = 3.0


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
    tails = "\n".join(f"--- {p}:\n" + (p.read_text(errors="replace")[-1500:] if p.exists() else "(none)") for p in paths)
    raise TimeoutError(f"no first training step within {timeout} s\n{tails}")


def wait_until(predicate, timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ----------------------------------------------------------------------------------------------- start-up
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


def nbworkers_launch(kernel: BenchKernel, workers: int, name: str, run_root: Path, rss: list[float]) -> tuple[float, int]:
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
        raise RuntimeError(f"cluster {name} ended {status}: " + kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()['error']"))
    forked = sum("--- nbworkers: forked from zygote" in p.read_text(errors="replace") for p in paths)
    return max(steps) - t0, forked


def bench_startup(kernel: BenchKernel, run_root: Path, workdir: Path, env: dict[str, str], sizes: list[int],
                  reps: int, rss: list[float]) -> dict:
    results = {}
    for workers in sizes:
        rows = []
        count = reps if workers <= 2 else max(1, reps - 1)
        for rep in range(count):
            hand = hand_launch(workers, workdir, env)
            cold, _ = nbworkers_launch(kernel, workers, f"cold-{workers}-{rep}", run_root, rss)
            rows.append({"hand": hand, "cold": cold})
            log(f"start-up n={workers} rep {rep + 1}/{count}: hand {hand:.2f} s, cold {cold:.2f} s")
        results[workers] = {
            "runs": rows,
            "hand": median(r["hand"] for r in rows),
            "cold": median(r["cold"] for r in rows),
            "cold_ratio": median(r["cold"] / r["hand"] for r in rows),
        }
    return results


# ----------------------------------------------------------------------------------------------- relay
INGEST_CELL = """%%worker -n 2 --name {name}
import os, sys, time
while not os.path.exists({gate!r}):
    time.sleep(0.005)
chunk = "".join(f"{{'x' * 60}} {{i}}\\n" for i in range(10000))
for _ in range({lines} // 10000):
    sys.stdout.write(chunk)
sys.stdout.flush()
from nbworkers.distlib import wire
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
               drops=_c._drop_counts())
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
_apply = _c._apply
def _timed_apply(message, _apply=_apply):
    _apply(message)
    if message.kind == "metrics":
        _applied.append((_time.time(), message.content["metrics"].get("t_report")))
_c._apply = _timed_apply
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
    kernel.output(INGEST_MEASURE.format(name="ingest", gate=str(gate), total=2 * lines, metrics=metrics, timeout=RUN_TIMEOUT))
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


# ----------------------------------------------------------------------------------------------- reporting cost
def bench_reporting_cost(env: dict[str, str], steps: int, rounds: int, model: tuple[int, int, int] = (128, 32, 1)) -> dict:
    from nbworkers.distlib import wire
    from nbworkers.magics.relay import RelayReceiver

    key = wire.new_key()
    relay = RelayReceiver(key)
    received = [0]
    stop = threading.Event()

    def drain():
        while not stop.is_set():
            received[0] += len(relay.poll(0.05))

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        run_env = {**env, "TF_USE_LEGACY_KERAS": "1", wire.ENV_RELAY: relay.address, wire.ENV_KEY: key,
                   wire.ENV_WORKER: "0", wire.ENV_GENERATION: "0"}
        proc = subprocess.run([PY, str(REPORTING_COST), str(steps), str(rounds), *map(str, model)], env=run_env, capture_output=True,
                              text=True, timeout=RUN_TIMEOUT)
        line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"reporting benchmark failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        data = json.loads(line[len("RESULT "):])
    finally:
        stop.set()
        thread.join()
        relay.close()
    ratios = [on / off for on, off in zip(data["on"], data["off"])]
    hook_ratios = [hook / off for hook, off in zip(data["hook"], data["off"])]
    result = {"on": median(data["on"]), "off": median(data["off"]), "cost": 1 - median(ratios),
              "hook_cost": 1 - median(hook_ratios),
              "own_share": data["own_share"],
              "reports_sent": data["reports_sent"], "received": received[0], "rounds": rounds, "steps": steps,
              "model": model, "spread": (min(ratios), max(ratios))}
    log(f"reporting ({model}): {result['off']:.0f} steps/s off, {result['on']:.0f} on, cost {result['cost'] * 100:.1f} %, "
        f"own time {result['own_share'] * 100:.2f} % of the fits, "
        f"an empty per-step callback {result['hook_cost'] * 100:.1f} %")
    return result


# ----------------------------------------------------------------------------------------------- recovery
def bench_recovery(kernel: BenchKernel, run_root: Path, reps: int, rss: list[float]) -> dict:
    restarts = kernel.value("hasattr(nbworkers.settings(), 'max_restarts')")
    if not restarts:
        return {"available": False, "why": "this build has no automatic restarts"}
    rows, phases = [], []
    for rep in range(reps):
        name = f"recover-{rep}"
        paths = [run_root / name / f"worker-{i}.log" for i in range(2)]
        kernel.output(worker_cell(2, name, "--env BENCH_STEPS=1000000 --env BENCH_STEP_DELAY=0.05"))
        wait_first_steps(paths)
        rss.append(kernel.rss_mb())
        snap = kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()")
        victim = snap["workers"][1]["pid"]
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        try:
            steps = wait_first_steps(paths, timeout=120, after="launch 1,")
            rows.append(max(steps) - t_kill)
            log(f"recovery rep {rep + 1}/{reps}: {rows[-1]:.2f} s from kill -9 to the first resumed step")
        except TimeoutError:
            status = kernel.value(f"nbworkers.get_cluster({name!r}).status")
            kernel.output(f"%workers stop {name}")
            return {"available": False, "why": f"no restart after a kill -9 (the cluster ended {status})"}
        restart = kernel.value(f"nbworkers.get_cluster({name!r}).snapshot().get('restart_history')") or []
        relaunched = restart[-1]["time"] if restart else None
        if relaunched:
            phases.append((relaunched - t_kill, max(steps) - relaunched))
            log(f"  kill -> relaunch {relaunched - t_kill:.2f} s (stop the group, backoff), relaunch -> first step "
                f"{max(steps) - relaunched:.2f} s")
        kernel.output(f"%workers stop {name}")
    return {"available": True, "recovery": median(rows), "runs": rows,
            "teardown": median(p[0] for p in phases), "restart": median(p[1] for p in phases)}


# ----------------------------------------------------------------------------------------------- report
def describe_machine() -> str:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = psutil.virtual_memory()
    try:
        from importlib.metadata import version

        tf = version("tensorflow")
    except Exception:
        tf = "?"
    return (f"{os.cpu_count()} cores ({model}), {mem.total / 2**30:.1f} GB memory, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, TensorFlow {tf}")


def fmt(value, spec: str = ".2f", unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "**missed**")


def render(results: dict, args, load_before, load_after, started: str, elapsed: float) -> str:
    rows = []
    startup = results.get("startup", {})
    for workers, s in startup.items():
        rows.append((f"first step, {workers} workers: hand launch (`python main.py &`)", f"{s['hand']:.2f} s", "baseline", ""))
        rows.append((f"first step, {workers} workers: nbworkers cold", f"{s['cold']:.2f} s",
                     f"{s['cold_ratio']:.2f}x hand", f"<= {TARGET_COLD}x: {verdict(s['cold_ratio'] <= TARGET_COLD)}"
                     if workers == 2 else f"({TARGET_COLD}x is for 2 workers)"))
    if not (results.get("zygote") or {}).get("ipyparallel"):  # measured by benchmarks/zygote.py when installed
        rows.append(("first step: ipyparallel engines", "not measured", "", "ipyparallel not installed, or --only without zygote"))
    relay = results.get("relay")
    if relay:
        rows.append(("relay ingest: log lines absorbed by the kernel", f"{relay['lines_per_s']:,.0f} lines/s", "",
                     f">= {TARGET_LINES:,}: {verdict(relay['lines_per_s'] >= TARGET_LINES)}"))
        rows.append(("relay ingest: metric messages absorbed", f"{relay['metrics_per_s']:,.0f} msg/s", "", ""))
        rows.append(("view updates sent meanwhile (busiest second / mean)",
                     f"{relay['updates_max_per_s']} / {relay['updates_mean_per_s']:.1f} per s", "", "<= ~4 per s: "
                     + verdict(relay["updates_max_per_s"] <= 5)))
        rows.append(("report() -> live view state, p50 / p99", f"{relay['view_p50']:.3f} / {relay['view_p99']:.3f} s", "",
                     f"p99 < {TARGET_P99} s: {verdict(relay['view_p99'] < TARGET_P99)}"))
        rows.append(("report() -> kernel state, p50 / p99", f"{relay['state_p50']:.3f} / {relay['state_p99']:.3f} s", "",
                     "includes report()'s 0.25 s throttle"))
        rows.append(("relay transport (message sent -> applied), p50 / p99",
                     f"{relay['transport_p50'] * 1000:.1f} / {relay['transport_p99'] * 1000:.1f} ms", "", ""))
    for key, label in (("reporting", "784-128-10, batch 32"), ("reporting_large", "784-512-512-10, batch 128")):
        cost = results.get(key)
        if cost:
            rows.append((f"training steps/s, reporting off / on (ReportCallback; {label})",
                         f"{cost['off']:.0f} / {cost['on']:.0f}", f"cost {cost['cost'] * 100:.1f} %",
                         f"A/B; fit-to-fit noise {cost['spread'][0]:.2f}-{cost['spread'][1]:.2f}"))
            rows.append((f"reporting's own time, share of training time ({label})",
                         f"{cost['own_share'] * 100:.2f} %", "",
                         f"<= {TARGET_COST * 100:.0f} %: {verdict(cost['own_share'] <= TARGET_COST)}"))
    cost = results.get("reporting")
    recovery = results.get("recovery")
    if recovery:
        if recovery.get("available"):
            cold = startup.get(2, {}).get("cold")
            limit = None if cold is None else cold + TARGET_RECOVERY_SLACK
            rows.append(("recovery: kill -9 of a worker -> first resumed step (2 workers)", f"{recovery['recovery']:.2f} s",
                         "" if cold is None else f"cold start + {recovery['recovery'] - cold:.2f} s",
                         f"<= cold + {TARGET_RECOVERY_SLACK:g} s: " + verdict(None if limit is None else recovery["recovery"] <= limit)))
        else:
            rows.append(("recovery: kill -9 of a worker -> first resumed step", "not available yet", "", recovery["why"]))
    if results.get("keras_fit"):
        import keras_fit

        rows += keras_fit.rows(results["keras_fit"])
    if results.get("zygote"):
        import zygote

        rows += zygote.rows(results["zygote"])
    if results.get("sessions"):
        import sessions

        rows += sessions.rows(results["sessions"])
    rss = results.get("rss")
    if rss:
        rows.append(("kernel resident memory: idle with nbworkers / first cluster running / most seen",
                     f"{rss['idle']:.0f} / {fmt(rss['first'], '.0f')} / {rss['running']:.0f} MB", "",
                     "TensorFlow in the kernel: " + ("yes (!)" if rss["tensorflow_in_kernel"] else "no")))
    width = [max(len(r[i]) for r in rows + [("measure", "median", "vs baseline", "target")]) for i in range(4)]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, width)) + " |"  # noqa: E731
    table = [line(("measure", "median", "vs baseline", "target")), "|" + "|".join("-" * (w + 2) for w in width) + "|"]
    table += [line(r) for r in rows]
    reps = "1 run each (--quick)" if args.quick else f"median of {args.reps} runs (4 workers: {max(1, args.reps - 1)})"
    details = []
    for workers, s in startup.items():
        runs = ", ".join(f"{r['hand']:.2f}/{r['cold']:.2f}" for r in s["runs"])
        details.append(f"- start-up, {workers} workers, each run hand/cold (s): {runs}")
    if recovery and recovery.get("available"):
        details.append("- recovery runs (s): " + ", ".join(f"{r:.2f}" for r in recovery["runs"])
                       + f"; median kill -> relaunch {fmt(recovery['teardown'])} s (the group is stopped: TERM, "
                       f"grace, KILL; then the restart backoff), relaunch -> first step {fmt(recovery['restart'])} s (workers spawned)")
    if relay:
        details.append(f"- relay: {relay['lines_absorbed']:,} of {relay['lines_sent']:,} log lines absorbed; "
                       f"{relay['report_calls']} report() calls (every 10 ms), {relay['messages_applied']} metric "
                       "messages reached the kernel (report() throttles to 4 a second)")
    if cost:
        details.append(f"- reporting cost: {cost['rounds']} rounds of alternating fits of {cost['steps']} steps "
                       f"(off / ReportCallback / an empty per-step callback), median of per-round ratios; "
                       f"{cost['reports_sent']} reports sent. An empty per-step Keras callback alone costs "
                       f"{cost['hook_cost'] * 100:.1f} %; on/off ratio per round from {cost['spread'][0]:.2f} to "
                       f"{cost['spread'][1]:.2f} (the noise floor of this shared machine).")
    large = results.get("reporting_large")
    if large:
        details.append(f"- reporting cost, larger model: {large['rounds']} rounds of {large['steps']} steps; an empty "
                       f"per-step Keras callback alone costs {large['hook_cost'] * 100:.1f} %; on/off ratio per round "
                       f"from {large['spread'][0]:.2f} to {large['spread'][1]:.2f}.")
    return "\n".join([
        "# nbworkers benchmarks",
        "",
        f"Measured {started} by `make bench`{' --quick' if args.quick else ''} ({reps}; {elapsed / 60:.1f} min).",
        "",
        f"Machine: {describe_machine()}.",
        f"Load average (1/5/15 min) before: {load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f}; "
        f"after: {load_after[0]:.2f} / {load_after[1]:.2f} / {load_after[2]:.2f}. The machine is shared: other "
        "people's tests may have run at the same time; ratios are taken per repetition, side by side.",
        "",
        *table,
        "",
        "Details:",
        *details,
        "",
        "How: start-up is the time from sending the cell (or starting the processes) to the `FIRST_STEP` line of "
        "the slowest worker, printed by a Keras callback after the first all-reduced step of "
        "`benchmarks/workload.py` (tf_keras, MultiWorkerMirroredStrategy, a 784-128-10 model). The hand launch "
        "starts the same file with `TF_CONFIG` set, as the TensorFlow tutorial does. Relay: two workers write log lines as fast "
        "as they can, then send metric messages; the kernel counts what reached its state while the live view "
        "is shown. Latency: one worker calls `report()` every 10 ms; for every call, the time until the view "
        "(or the kernel's state) held that value or a newer one.",
        "",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description="nbworkers benchmarks (writes benchmarks/results.md)")
    parser.add_argument("--quick", action="store_true", help="one run each, smaller loads (about 2 minutes)")
    parser.add_argument("--reps", type=int, default=3, help="runs per start-up figure (default 3)")
    parser.add_argument("--sizes", default="", help="worker counts for start-up (default 2,4; --quick: 2)")
    parser.add_argument("--only", default="", help="comma list of: startup,relay,reporting,recovery,keras_fit,sessions,zygote")
    parser.add_argument("--output", default=str(RESULTS), help="where the table is written")
    args = parser.parse_args()
    if args.quick:
        args.reps = 1
    sizes = [int(s) for s in args.sizes.split(",") if s] or ([2] if args.quick else [2, 4])
    only = set(args.only.split(",")) if args.only else {"startup", "relay", "reporting", "recovery", "keras_fit", "sessions", "zygote"}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = os.getloadavg()
    t_start = time.monotonic()
    results: dict = {}
    env = base_env()
    with tempfile.TemporaryDirectory(prefix="nbworkers-bench-") as tmp_name:
        tmp = Path(tmp_name)
        run_root = tmp / "runs"
        run_root.mkdir()
        notebook = tmp / "notebook"
        notebook.mkdir()
        handdir = tmp / "hand"
        handdir.mkdir()
        log(f"machine: {describe_machine()}; load {load_before}")
        # zygotes off here: these figures are the spawn path; benchmarks/zygote.py measures zygotes
        kernel = BenchKernel(notebook, {**env, "NBWORKERS_RUN_ROOT": str(run_root), "NBWORKERS_ZYGOTE": "0"})
        rss: list[float] = []
        try:
            idle_rss = kernel.rss_mb()
            if "startup" in only:
                results["startup"] = bench_startup(kernel, run_root, handdir, env, sizes, args.reps, rss)
            if "relay" in only:
                results["relay"] = bench_relay(kernel, tmp, lines=200_000 if args.quick else 500_000,
                                               metrics=10_000 if args.quick else 20_000,
                                               seconds=5 if args.quick else 10)
            if "reporting" in only:
                results["reporting"] = bench_reporting_cost(env, steps=400 if args.quick else 1000,
                                                            rounds=6 if args.quick else 9)
                # ~3 s fits: shorter ones swing by more than the 2 % being measured here (benchmarks/notes.md)
                results["reporting_large"] = bench_reporting_cost(env, steps=100 if args.quick else 500,
                                                                  rounds=3 if args.quick else 7, model=(512, 128, 2))
            if "keras_fit" in only:  # Keras 3 model.fit vs distlib.fit vs tf_keras fit (benchmarks/keras_fit.py)
                import keras_fit

                results["keras_fit"] = keras_fit.bench(rounds=1 if args.quick else 3, steps=60 if args.quick else 150)
            if "sessions" in only:  # interactive sessions (benchmarks/sessions.py)
                import sessions

                results["sessions"] = sessions.bench(
                    kernel, run_root, handdir, env, 1 if args.quick else args.reps, workload=WORKLOAD,
                    hand_launch=hand_launch, first_steps=first_steps, wait_first_steps=wait_first_steps, log=log)
            if "zygote" in only:  # fork server start-up, warm, recovery, memory (benchmarks/zygote.py)
                import zygote

                results["zygote"] = zygote.bench(tmp, handdir, env, sizes, 1 if args.quick else args.reps,
                                                 BenchKernel=BenchKernel, hand_launch=hand_launch,
                                                 nbworkers_launch=nbworkers_launch, worker_cell=worker_cell,
                                                 wait_first_steps=wait_first_steps, log=log, workload=WORKLOAD,
                                                 free_ports=pick_free_ports)
            if "recovery" in only:
                results["recovery"] = bench_recovery(kernel, run_root, 1 if args.quick else 2, rss)
            results["rss"] = {"idle": idle_rss, "first": rss[0] if rss else None,
                              "running": max(rss) if rss else kernel.rss_mb(),
                              "tensorflow_in_kernel": kernel.value("'tensorflow' in __import__('sys').modules")}
        finally:
            kernel.shutdown()
            wait_until(lambda: not processes_under(run_root), 15)
    elapsed = time.monotonic() - t_start
    text = render(results, args, load_before, os.getloadavg(), started, elapsed)
    Path(args.output).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
