"""Interactive sessions (``%%worker --session``), called from ``benchmarks/run.py`` (``--only sessions``).

Per repetition, side by side on the same machine:

- hand: the TensorFlow tutorial's launch of ``workload.py`` (``TF_CONFIG`` + ``python main.py &``) to its first
  step (the baseline of every start-up figure);
- session: in a live session whose earlier cells built the strategy, the data and the model and ran one
  fit, the time from sending a second ``model.fit`` cell to its first step (target <= 0.05x hand);
- one worker's error: worker 1 raises while worker 0 waits in the all-reduce of a fit; the time from worker 1's
  error to the end of the cell on worker 0 (its abort) and to the failed cell in the kernel (target <= 5 s);
- idle: the CPU the session's worker processes use while no cell runs (target: none).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import psutil

TARGET_SESSION = 0.05  # x hand launch
TARGET_ERROR_END = 5.0  # seconds
IDLE_SECONDS = 5.0

SETUP = "%%worker -n 2 --session {name} --env TF_USE_LEGACY_KERAS=1 --block\n"
FIT = """%%worker --session {name}
model.fit(dataset, epochs=1, steps_per_epoch=STEPS, verbose=0, callbacks=[FirstStep()])
print("DONE", flush=True)
"""
ERROR = """%%worker --session {name} --block --no-raise
if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
    time.sleep(1.0)  # worker 0 is inside the all-reduce of its first step by now
    raise ValueError("worker 1 fails")
model.fit(dataset, epochs=1, steps_per_epoch=1000, verbose=0)
"""


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _setup_code(workload: Path) -> str:
    """``workload.py`` up to (not including) its ``model.fit``: strategy, data, model, the FirstStep callback."""
    text = workload.read_text()
    return text[: text.index("\nmodel.fit(")] + "\n"


def _session_first_step(kernel, run_root: Path, name: str, cell: int, first_steps, wait_first_steps) -> float:
    paths = [run_root / name / f"worker-{i}.log" for i in range(2)]
    t0 = time.time()
    kernel.output(FIT.format(name=name))
    steps = wait_first_steps(paths, after=f"--- nbworkers: cell {cell} start ---")
    kernel.output(f"nbworkers.session({name!r}).cells[-1].wait(300)")
    return max(steps) - t0


def _idle_cpu(kernel, name: str) -> float:
    pids = kernel.value(f"[w['pid'] for w in nbworkers.session({name!r}).snapshot()['workers']]")
    procs = [psutil.Process(pid) for pid in pids]
    before = [sum(p.cpu_times()[:2]) for p in procs]
    time.sleep(IDLE_SECONDS)
    after = [sum(p.cpu_times()[:2]) for p in procs]
    return max(b - a for a, b in zip(before, after)) / IDLE_SECONDS


def bench(kernel, run_root: Path, handdir: Path, env: dict[str, str], reps: int, *, workload: Path, hand_launch,
          first_steps, wait_first_steps, log) -> dict:
    rows = []
    setup = _setup_code(workload)
    for rep in range(reps):
        name = f"session-{rep}"
        hand = hand_launch(2, handdir, env)
        kernel.output(SETUP.format(name=name) + setup + "import json\n")
        first = _session_first_step(kernel, run_root, name, 2, first_steps, wait_first_steps)
        second = _session_first_step(kernel, run_root, name, 3, first_steps, wait_first_steps)
        idle = _idle_cpu(kernel, name)
        kernel.output(ERROR.format(name=name), timeout=120)
        cell = f"nbworkers.session({name!r}).cells[-1]"
        raised, worker0_end, kernel_end = kernel.value(
            f"({cell}.ends[1].t, {cell}.ends[0].t, {cell}.ended)")
        kernel.output(f"%workers stop {name}")
        row = {"hand": hand, "first_fit": first, "session": second, "idle_cpu": idle,
               "error_worker0": worker0_end - raised, "error_kernel": kernel_end - raised}
        log(f"sessions rep {rep + 1}/{reps}: hand {hand:.2f} s, session first fit "
            f"{first:.2f} s, second fit {second:.3f} s; error -> worker 0 ended {row['error_worker0']:.2f} s, "
            f"cell failed {row['error_kernel']:.2f} s; idle CPU {idle * 100:.1f} %")
        rows.append(row)
    return {
        "runs": rows,
        "hand": _median(r["hand"] for r in rows),
        "session": _median(r["session"] for r in rows),
        "first_fit": _median(r["first_fit"] for r in rows),
        "session_ratio": _median(r["session"] / r["hand"] for r in rows),
        "error_worker0": _median(r["error_worker0"] for r in rows),
        "error_kernel": _median(r["error_kernel"] for r in rows),
        "idle_cpu": _median(r["idle_cpu"] for r in rows),
    }


def rows(result: dict) -> list[tuple[str, str, str, str]]:
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    return [
        ("first step, 2 workers: hand launch (sessions' baseline)", f"{result['hand']:.2f} s", "baseline", ""),
        ("first step: a second fit cell in a live session", f"{result['session']:.3f} s",
         f"{result['session_ratio']:.3f}x hand",
         f"<= {TARGET_SESSION}x hand: {verdict(result['session_ratio'] <= TARGET_SESSION)}"),
        ("first step: the session's first fit cell (tracing)", f"{result['first_fit']:.2f} s", "", ""),
        ("one worker's error -> the other worker's cell ended (abort)", f"{result['error_worker0']:.2f} s", "",
         f"<= {TARGET_ERROR_END:g} s: {verdict(result['error_worker0'] <= TARGET_ERROR_END)}"),
        ("one worker's error -> the cell failed in the kernel", f"{result['error_kernel']:.2f} s", "",
         f"<= {TARGET_ERROR_END:g} s: {verdict(result['error_kernel'] <= TARGET_ERROR_END)}"),
        ("idle session: CPU of its busiest worker process", f"{result['idle_cpu'] * 100:.1f} %", "",
         "an idle session costs no CPU"),
    ]
