"""Keras 3 on JAX across two processes (``--only jax``; issue 41): a ``%%worker -n 2 --framework jax`` cell against a
hand launch of the same script, side by side.

- hand: two ``python -P`` processes with Keras' environment contract (``KERAS_BACKEND=jax``,
  ``KERAS_DISTRIBUTION_JOB_ADDRESSES`` with the coordinator first, ``KERAS_DISTRIBUTION_NUM_PROCESSES``,
  ``KERAS_DISTRIBUTION_PROCESS_ID``, ``JAX_NUM_CPU_DEVICES=1``) running ``jax_workload.py``, which calls
  ``keras.distribution.initialize()`` and sets ``DataParallel`` itself: seconds from the start to the first step of
  both (the baseline);
- cold: a fresh kernel (zygotes on, not prewarmed), the cell's first run (the JAX zygote's imports, then the forks),
  with JAX's compilation cache empty (a fresh ``NBWORKERS_RUNTIME_DIR``: every program compiled);
- warm: the same cell again in that kernel (forks of the zygote already there; the programs the cold run compiled
  loaded from the cache, by both processes: distlib/compat/jax/compile_cache.py);
- steady: each run's training steps/s after its first ten steps (worker 0's), nbworkers' against the hand launch's.

Targets (issue 41): warm at most 0.3x and cold at most 1.0x the hand launch; steady steps/s about the hand
launch's (the same processes train the same way once started). When jax is not installed, or this nbworkers has
no ``--framework jax`` yet, the section says so and measures nothing.
"""

from __future__ import annotations

import importlib.util
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from nbworkers.magics.launch.ports import pick_free_ports

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "jax_workload.py"
PY = sys.executable
WORKERS = 2
TARGET_COLD = 1.0
TARGET_WARM = 0.3
RUN_TIMEOUT = 300.0  # seconds one run may take before the benchmark gives up on it
STEADY = re.compile(r"^STEADY (\d+\.\d+)", re.M)
CHECKSUM = re.compile(r"^PROCESSES (\d+) CHECKSUM (\S+)", re.M)
FRAMEWORK_CHECK = ("'jax' in __import__('nbworkers.magics.frameworks.registry', fromlist=['r']).frameworks()")


def unavailable() -> str | None:
    """Why the section cannot run here, or None."""
    if importlib.util.find_spec("jax") is None or importlib.util.find_spec("keras") is None:
        return "jax is not installed in this environment: pip install 'nbworkers[jax]' (or jax==0.10.2)"
    return None


def _hand_env(env: dict[str, str], ports: list[int], index: int) -> dict[str, str]:
    return {**env, "KERAS_BACKEND": "jax", "JAX_NUM_CPU_DEVICES": "1", "BENCH_JAX_HAND": "1",
            "KERAS_DISTRIBUTION_JOB_ADDRESSES": ",".join(f"127.0.0.1:{p}" for p in ports),
            "KERAS_DISTRIBUTION_NUM_PROCESSES": str(len(ports)), "KERAS_DISTRIBUTION_PROCESS_ID": str(index)}


def hand_launch(workdir: Path, env: dict[str, str], *, wait_first_steps, kill_group) -> dict:
    """Two processes started by hand; seconds to the first step of both, worker 0's steady steps/s, checksums."""
    for old in workdir.glob("jax_*.log"):
        old.unlink()
    ports = pick_free_ports(WORKERS)
    procs, paths = [], []
    t0 = time.time()
    for i in range(WORKERS):
        path = workdir / f"jax_{i}.log"
        with open(path, "wb") as out:
            procs.append(subprocess.Popen([PY, "-P", str(WORKLOAD)], stdout=out, stderr=subprocess.STDOUT,
                                          cwd=workdir, env=_hand_env(env, ports, i), start_new_session=True))
        paths.append(path)
    try:
        steps = wait_first_steps(paths)
        for proc in procs:
            proc.wait(timeout=RUN_TIMEOUT)
    finally:
        for proc in procs:
            kill_group(proc)
    return {"first": max(steps) - t0, **_ends(paths)}


def _ends(paths: list[Path]) -> dict:
    texts = [p.read_text(errors="replace") for p in paths]
    steady = STEADY.search(texts[0])
    sums = [CHECKSUM.search(t) for t in texts]
    if not all(sums):
        raise RuntimeError("a JAX run ended without its checksum:\n" + "\n".join(t[-1500:] for t in texts))
    return {"steady": float(steady.group(1)) if steady else None,
            "processes": [int(m.group(1)) for m in sums if m], "checksums": [m.group(2) for m in sums if m]}


def _cell(name: str) -> str:
    return f"%%worker -n {WORKERS} --framework jax --name {name}\n" + WORKLOAD.read_text()


def nbworkers_launch(kernel, name: str, run_root: Path, *, wait_first_steps) -> dict:
    """A ``%%worker --framework jax`` cell: seconds from sending it to the first step of both workers, and its ends."""
    paths = [run_root / name / f"worker-{i}.log" for i in range(WORKERS)]
    t0 = time.time()
    msg_id = kernel.send(_cell(name))
    error = kernel.collect(msg_id, RUN_TIMEOUT).error_line
    if error:
        raise RuntimeError(f"%%worker --framework jax failed: {error}")
    steps = wait_first_steps(paths)
    kernel.output(f"%workers wait {name} --timeout {RUN_TIMEOUT:g}")
    status = kernel.value(f"nbworkers.get_cluster({name!r}).status")
    if status != "finished":
        raise RuntimeError(f"cluster {name} ended {status}: "
                           + str(kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()['error']")))
    forked = sum("--- nbworkers: forked from zygote" in p.read_text(errors="replace") for p in paths)
    return {"first": max(steps) - t0, "forked": forked, **_ends(paths)}


def bench(tmp: Path, handdir: Path, env: dict[str, str], reps: int, *, BenchKernel, wait_first_steps, kill_group,
          log) -> dict:
    why = unavailable()
    if why:
        log(f"jax: not measured ({why})")
        return {"available": False, "why": why}
    notebook = tmp / "jax-notebook"
    notebook.mkdir(exist_ok=True)
    rows = []
    for rep in range(reps):
        run_root = tmp / f"jax-runs-{rep}"
        run_root.mkdir(mode=0o700)
        hand = hand_launch(handdir, env, wait_first_steps=wait_first_steps, kill_group=kill_group)
        runtime = tmp / f"jax-runtime-{rep}"  # a fresh one: JAX's compilation cache is empty for the cold run
        runtime.mkdir(mode=0o700)
        kernel = BenchKernel(notebook, {**env, "NBWORKERS_RUN_ROOT": str(run_root), "NBWORKERS_ZYGOTE": "1",
                                        "NBWORKERS_ZYGOTE_PREWARM": "0", "NBWORKERS_RUNTIME_DIR": str(runtime)})
        try:
            if not kernel.value(FRAMEWORK_CHECK):
                why = ("this nbworkers has no `%%worker --framework jax` yet (issue 41's kernel side): only the hand "
                       f"launch was measured ({hand['first']:.2f} s to the first step, {hand['steady'] or 0:.1f} "
                       "steps/s)")
                log(f"jax: {why}")
                return {"available": False, "why": why, "hand": hand}
            cold = nbworkers_launch(kernel, "jax-cold", run_root, wait_first_steps=wait_first_steps)
            warm = nbworkers_launch(kernel, "jax-warm", run_root, wait_first_steps=wait_first_steps)
        finally:
            kernel.shutdown()
        row = {"hand": hand, "cold": cold, "warm": warm}
        rows.append(row)
        log(f"jax rep {rep + 1}/{reps}: hand {hand['first']:.2f} s, cold {cold['first']:.2f} s "
            f"({cold['forked']}/2 forked), warm {warm['first']:.2f} s ({warm['forked']}/2 forked); steady steps/s "
            f"hand {hand['steady']}, cold {cold['steady']}, warm {warm['steady']}; checksums {cold['checksums']}")
    return summarize(rows)


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(rows: list[dict]) -> dict:
    runs = [r[k] for r in rows for k in ("cold", "warm")]
    return {
        "available": True,
        "runs": rows,
        "hand": _median(r["hand"]["first"] for r in rows),
        "cold": _median(r["cold"]["first"] for r in rows),
        "warm": _median(r["warm"]["first"] for r in rows),
        "cold_ratio": _median(r["cold"]["first"] / r["hand"]["first"] for r in rows),
        "warm_ratio": _median(r["warm"]["first"] / r["hand"]["first"] for r in rows),
        "hand_steady": _median(r["hand"]["steady"] for r in rows),
        "steady": _median(r[k]["steady"] for r in rows for k in ("cold", "warm")),
        "steady_ratio": _median(r[k]["steady"] / r["hand"]["steady"] for r in rows for k in ("cold", "warm")
                                if r[k]["steady"] and r["hand"]["steady"]),
        "all_forked": all(r["forked"] == WORKERS for r in runs),
        "same_weights": all(len(set(r["checksums"])) == 1 and r["processes"] == [WORKERS] * WORKERS for r in runs),
    }


def rows(result: dict) -> list[tuple[str, str, str, str]]:
    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    if not result.get("available"):
        hand = result.get("hand")
        return [("Keras on JAX, 2 processes: first step", "not measured", "" if hand is None else
                 f"hand launch {hand['first']:.2f} s", result["why"])]
    forked = "" if result["all_forked"] else " (not every worker forked!)"
    same = "" if result["same_weights"] else " (the workers' weights differ!)"
    steady_ratio = result["steady_ratio"]
    return [
        ("Keras on JAX, first step, 2 processes: hand launch (keras.distribution.initialize)",
         f"{result['hand']:.2f} s", "baseline", ""),
        (f"Keras on JAX, first step: cold %%worker --framework jax{forked}{same}", f"{result['cold']:.2f} s",
         f"{result['cold_ratio']:.2f}x hand", f"<= {TARGET_COLD}x: {verdict(result['cold_ratio'] <= TARGET_COLD)}"),
        ("Keras on JAX, first step: warm %%worker --framework jax (forks)", f"{result['warm']:.2f} s",
         f"{result['warm_ratio']:.2f}x hand", f"<= {TARGET_WARM}x: {verdict(result['warm_ratio'] <= TARGET_WARM)}"),
        ("Keras on JAX, steady training steps/s after 10 steps (worker 0): hand / %%worker",
         f"{result['hand_steady'] or 0:.0f} / {result['steady'] or 0:.0f}",
         "n/a" if steady_ratio is None else f"{steady_ratio:.2f}x hand", "about 1x: the same processes once started"),
    ]


def main() -> int:
    """``python benchmarks/jax_startup.py``: the hand launch alone, once (a check of the workload)."""
    import tempfile

    from harness import base_env, kill_group, wait_first_steps

    with tempfile.TemporaryDirectory(prefix="nbworkers-jax-") as tmp:
        why = unavailable()
        if why:
            print(why)
            return 1
        print(hand_launch(Path(tmp), base_env(), wait_first_steps=wait_first_steps, kill_group=kill_group))
    return 0


if __name__ == "__main__":
    sys.exit(main())
