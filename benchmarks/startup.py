"""Start-up (``--only startup``): a ``%%worker`` cell's first step vs the hand launch, side by side."""

from __future__ import annotations

from pathlib import Path

from harness import BenchKernel, hand_launch, log, median, nbworkers_launch


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
