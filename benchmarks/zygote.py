"""Zygotes (workers forked from a process that imported TensorFlow once), called from ``benchmarks/run.py`` (``--only zygote``).

Per repetition and worker count, side by side on the same machine:

- hand: the TensorFlow tutorial's launch of ``workload.py`` (``TF_CONFIG`` + ``python main.py &``) to the first
  step of every worker (the baseline);
- cold: a fresh kernel with zygotes on, the ``%%worker`` cell's first run (one TensorFlow import, in the zygote,
  then N forks) to the first step of every worker (targets: 2 workers <= 0.6x, 4 workers <= 0.45x hand);
- warm: the same cell again in that kernel (a fork each, the zygote already there; target <= 0.1x hand);
- prewarmed: a fresh kernel with ``zygote_prewarm`` on (the default), its zygote started by ``%load_ext`` and
  ready (as when the user takes a few seconds to write the cell), then the cell's first run;

then, once: ``kill -9`` of a forked worker in a long run -> the first step of the restarted (forked) group
(target 1.5 s plus the checkpoint load), and the memory the zygote holds between runs (RSS and PSS: the
children share its pages copy-on-write; the removed warm spare pool held about 0.5 GB per worker).
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from pathlib import Path

import psutil

TARGET_COLD = {2: 0.6, 4: 0.45}
TARGET_WARM = 0.1
TARGET_RECOVERY = 1.5  # seconds, plus the checkpoint load
FORKED_LINE = "--- nbworkers: forked from zygote"


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _zygote_memory(kernel) -> dict:
    pids = kernel.value("[z['pid'] for z in __import__('nbworkers.magics.backends.zygotes', fromlist=['z'])"
                        ".zygotes().describe() if z['alive']]")
    rss = pss = 0.0
    for pid in pids:
        info = psutil.Process(pid).memory_full_info()
        rss += info.rss / 2**20
        pss += getattr(info, "pss", info.rss) / 2**20
    return {"zygotes": len(pids), "rss_mb": rss, "pss_mb": pss}


def _recovery(kernel, run_root: Path, worker_cell, wait_first_steps, log, name: str = "z-recover") -> tuple[float, int]:
    paths = [run_root / name / f"worker-{i}.log" for i in range(2)]
    kernel.output(worker_cell(2, name, "--env BENCH_STEPS=1000000 --env BENCH_STEP_DELAY=0.05"))
    wait_first_steps(paths)
    victim = kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()")["workers"][1]["pid"]
    t_kill = time.time()
    os.kill(victim, signal.SIGKILL)
    steps = wait_first_steps(paths, timeout=120, after="launch 1,")
    forked = sum(FORKED_LINE in p.read_text(errors="replace").rsplit("launch 1,", 1)[-1] for p in paths)
    restart = kernel.value(f"nbworkers.get_cluster({name!r}).snapshot().get('restart_history')") or []
    kernel.output(f"%workers stop {name}")
    relaunched = restart[-1]["time"] - t_kill if restart else float("nan")
    log(f"{name}: {max(steps) - t_kill:.2f} s from kill -9 to the first resumed step ({forked}/2 forked; "
        f"kill -> relaunch {relaunched:.2f} s, relaunch -> first step {max(steps) - t_kill - relaunched:.2f} s)")
    return max(steps) - t_kill, forked


def _prewarmed_first_run(BenchKernel, notebook: Path, env: dict[str, str], run_root: Path, workers: int,
                         nbworkers_launch) -> float:
    """The first %%worker cell of a kernel whose zygote %load_ext started, once that zygote is ready."""
    # the workload's cell sets TF_USE_LEGACY_KERAS=1 with --env: a kernel that sets it for itself prewarms that zygote
    kernel = BenchKernel(notebook, {**env, "NBWORKERS_RUN_ROOT": str(run_root), "NBWORKERS_ZYGOTE": "1",
                                    "NBWORKERS_ZYGOTE_PREWARM": "1", "TF_USE_LEGACY_KERAS": "1"})
    try:
        logs = kernel.value("[z['log'] for z in __import__('nbworkers.magics.backends.zygotes', fromlist=['z'])"
                            ".zygotes().describe()]")
        deadline = time.monotonic() + 120
        while not all(": ready (" in Path(p).read_text(errors="replace") for p in logs):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the prewarmed zygote is not ready: {logs}")
            time.sleep(0.1)
        seconds, forked = nbworkers_launch(kernel, workers, "z-prewarmed", run_root, [])
        if forked != workers or len(logs) != 1 or len(kernel.value("__import__('nbworkers.magics.backends.zygotes', "
                                                                    "fromlist=['z']).zygotes().describe()")) != 1:
            raise RuntimeError(f"the prewarmed zygote did not serve the first run ({forked}/{workers} forked)")
        return seconds
    finally:
        kernel.shutdown()


def _ipyparallel(workers: int, workdir: Path, workload: Path, free_ports, wait_first_steps) -> dict | None:
    """ipyparallel as a notebook would use it: start engines, give each its TF_CONFIG, run the same script on all
    (its output to a file per engine), to the first step of every engine; then the time to stop the engines."""
    try:
        import ipyparallel as ipp
    except ImportError:
        return None
    import json

    cluster_spec = {"worker": [f"localhost:{p}" for p in free_ports(workers)]}
    paths = [workdir / f"ipp_{i}.log" for i in range(workers)]
    for path in paths:
        path.unlink(missing_ok=True)
    t0 = time.time()
    cluster = ipp.Cluster(n=workers, log_level=40)
    client = cluster.start_and_connect_sync()
    try:
        client.wait_for_engines(workers, timeout=120)
        for i in range(workers):
            config = json.dumps({"cluster": cluster_spec, "task": {"type": "worker", "index": i}})
            client[i].execute(ENGINE_SETUP.format(config=config, path=str(paths[i])), block=True)
        client[:].execute(workload.read_text(), block=False)
        steps = wait_first_steps(paths)
    finally:
        t_stop = time.time()
        cluster.stop_cluster_sync()
        stopped = time.time() - t_stop
    return {"first_step": max(steps) - t0, "stop": stopped}


ENGINE_SETUP = """
import os, sys
os.environ.update({{"TF_CONFIG": {config!r}, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}})
sys.stdout = open({path!r}, "w", buffering=1)
"""


def bench(tmp: Path, handdir: Path, env: dict[str, str], sizes: list[int], reps: int, *, BenchKernel, hand_launch,
          nbworkers_launch, worker_cell, wait_first_steps, log, workload: Path | None = None,
          free_ports=None) -> dict:
    results: dict = {"sizes": {}}
    if workload is not None and free_ports is not None:  # ipyparallel side by side with a hand launch, 2 workers
        try:
            hand = hand_launch(2, handdir, env)
            ipp = _ipyparallel(2, handdir, workload, free_ports, wait_first_steps)
            if ipp is not None:
                results["ipyparallel"] = {**ipp, "hand": hand}
                log(f"ipyparallel n=2: hand {hand:.2f} s, engines started -> first step {ipp['first_step']:.2f} s, "
                    f"stopping the engines {ipp['stop']:.2f} s")
        except Exception as error:  # a comparison, not ours: report it missing rather than fail the run
            log(f"ipyparallel: not measured ({error!r})")
    notebook = tmp / "zygote-notebook"
    notebook.mkdir(exist_ok=True)
    kernel = None
    for workers in sizes:
        rows = []
        for rep in range(reps if workers <= 2 else max(1, reps - 1)):
            run_root = tmp / f"zygote-runs-{workers}-{rep}"
            run_root.mkdir()
            hand = hand_launch(workers, handdir, env)
            kernel = BenchKernel(notebook, {**env, "NBWORKERS_RUN_ROOT": str(run_root), "NBWORKERS_ZYGOTE": "1",
                                            "NBWORKERS_ZYGOTE_PREWARM": "0"})
            try:
                cold, forked_cold = nbworkers_launch(kernel, workers, "z-cold", run_root, [])
                warm, forked_warm = nbworkers_launch(kernel, workers, "z-warm", run_root, [])
                row = {"hand": hand, "cold": cold, "warm": warm, "forked_cold": forked_cold, "forked_warm": forked_warm}
                if workers == sizes[0] and rep == 0:
                    results["memory"] = _zygote_memory(kernel)
                    results["recovery"], results["recovery_forked"] = _recovery(kernel, run_root, worker_cell,
                                                                                wait_first_steps, log)
                    kernel.output("nbworkers.settings().zygote = False")  # the same kill -9, spawned restart
                    results["recovery_spawned"], _ = _recovery(kernel, run_root, worker_cell, wait_first_steps, log,
                                                               "z-recover-spawned")
                    kernel.output("nbworkers.settings().zygote = True")
            finally:
                kernel.shutdown()
            row["prewarmed"] = _prewarmed_first_run(BenchKernel, notebook, env, run_root, workers, nbworkers_launch)
            log(f"zygote n={workers} rep {rep + 1}: hand {hand:.2f} s, cold {cold:.2f} s ({forked_cold}/{workers} "
                f"forked), warm {warm:.2f} s ({forked_warm}/{workers} forked), prewarmed first run "
                f"{row['prewarmed']:.2f} s")
            rows.append(row)
        results["sizes"][workers] = {
            "runs": rows,
            "hand": _median(r["hand"] for r in rows),
            "cold": _median(r["cold"] for r in rows),
            "warm": _median(r["warm"] for r in rows),
            "cold_ratio": _median(r["cold"] / r["hand"] for r in rows),
            "warm_ratio": _median(r["warm"] / r["hand"] for r in rows),
            "prewarmed": _median(r["prewarmed"] for r in rows),
            "prewarmed_ratio": _median(r["prewarmed"] / r["hand"] for r in rows),
            "all_forked": all(r["forked_cold"] == workers and r["forked_warm"] == workers for r in rows),
        }
    return results


def rows(result: dict) -> list[tuple[str, str, str, str]]:
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    out = []
    for workers, r in result["sizes"].items():
        forked = "" if r["all_forked"] else " (not every worker forked!)"
        out.append((f"zygote: first step, {workers} workers: hand launch", f"{r['hand']:.2f} s", "baseline", ""))
        target = TARGET_COLD.get(int(workers))
        out.append((f"zygote: first step, {workers} workers: cold %%worker (one import, forks){forked}",
                    f"{r['cold']:.2f} s", f"{r['cold_ratio']:.2f}x hand",
                    f"<= {target}x: {verdict(r['cold_ratio'] <= target)}" if target else ""))
        out.append((f"zygote: first step, {workers} workers: first %%worker, zygote prewarmed at %load_ext",
                    f"{r['prewarmed']:.2f} s", f"{r['prewarmed_ratio']:.2f}x hand",
                    f"<= {target}x (the cold target): {verdict(r['prewarmed_ratio'] <= target)}" if target else ""))
        out.append((f"zygote: first step, {workers} workers: warm %%worker (forks)", f"{r['warm']:.2f} s",
                    f"{r['warm_ratio']:.2f}x hand", f"<= {TARGET_WARM}x: {verdict(r['warm_ratio'] <= TARGET_WARM)}"))
    if "recovery" in result:
        out.append(("zygote: kill -9 of a worker -> first resumed step (2 workers, forked restart)",
                    f"{result['recovery']:.2f} s", f"{result['recovery_forked']}/2 forked",
                    f"<= {TARGET_RECOVERY} s + checkpoint load"))
    if "recovery_spawned" in result:
        out.append(("zygote: the same, zygote off (spawned restart)", f"{result['recovery_spawned']:.2f} s",
                     f"forked {result['recovery'] / result['recovery_spawned']:.2f}x this", ""))
    if "ipyparallel" in result:
        i = result["ipyparallel"]
        out.append(("ipyparallel: 2 engines started, TF_CONFIG each, same script -> first step",
                    f"{i['first_step']:.2f} s", f"{i['first_step'] / i['hand']:.2f}x hand ({i['hand']:.2f} s)", ""))
        out.append(("ipyparallel: stopping its 2 engines afterwards", f"{i['stop']:.2f} s", "", ""))
    if "memory" in result:
        m = result["memory"]
        out.append(("zygote: memory held between runs (RSS / PSS)", f"{m['rss_mb']:.0f} / {m['pss_mb']:.0f} MB",
                    f"{m['zygotes']} zygote(s)", "one import's memory, not one per worker"))
    return out
