"""Recovery (``--only recovery``): ``kill -9`` of a worker to the first step of the restarted group."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from harness import BenchKernel, log, median, wait_first_steps, worker_cell


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
