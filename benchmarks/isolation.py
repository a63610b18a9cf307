"""Run isolation's start-up cost (``--only isolation``): the same warm ``%%worker`` launch (workers forked from a
zygote that is already there) with each run's workers in a private network namespace (``isolation = 'auto'``, the
default: one holder process per run, every worker joins with ``setns``) and without (``isolation = 'off'``),
alternating in one kernel; the ratio is taken per pair, then the median. Beside it, the time the kernel takes to
start a holder and read its answer (a worker's ``setns`` costs microseconds).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path


def bench(notebook: Path, run_root: Path, env: dict[str, str], reps: int, *, BenchKernel, nbworkers_launch,
          log, workers: int = 2) -> dict:
    run_root.mkdir(exist_ok=True)
    kernel = BenchKernel(notebook, {**env, "NBWORKERS_RUN_ROOT": str(run_root), "NBWORKERS_ZYGOTE": "1",
                                    "NBWORKERS_ZYGOTE_PREWARM": "0", "NBWORKERS_ISOLATION": "auto"})
    pairs = []
    try:
        nbworkers_launch(kernel, workers, "iso-first", run_root, [])  # the zygote's import: not measured
        for rep in range(reps):
            kernel.output("nbworkers.settings().isolation = 'auto'")
            isolated, _ = nbworkers_launch(kernel, workers, f"iso-on-{rep}", run_root, [])
            namespaces = kernel.value(f"nbworkers.get_cluster('iso-on-{rep}').backend.isolated")
            kernel.output("nbworkers.settings().isolation = 'off'")
            open_, _ = nbworkers_launch(kernel, workers, f"iso-off-{rep}", run_root, [])
            log(f"isolation n={workers} rep {rep + 1}: warm launch {isolated:.2f} s in a private namespace "
                f"({'made' if namespaces else 'NOT available'}), {open_:.2f} s without")
            holder = kernel.value("(lambda t, ns: (ns.start(10).close(), __import__('time').monotonic() - t)[1])("
                                  "__import__('time').monotonic(), "
                                  "__import__('nbworkers.magics.backends.isolation', fromlist=['x']).RunNamespace)")
            pairs.append({"isolated": isolated, "open": open_, "namespaces": namespaces, "holder": holder})
            time.sleep(0.5)
    finally:
        kernel.shutdown()
    return {
        "workers": workers,
        "pairs": pairs,
        "isolated": statistics.median(p["isolated"] for p in pairs),
        "open": statistics.median(p["open"] for p in pairs),
        "ratio": statistics.median(p["isolated"] / p["open"] for p in pairs),
        "namespaces": all(p["namespaces"] for p in pairs),
        "holder": statistics.median(p["holder"] for p in pairs),
    }


def rows(result: dict) -> list[tuple[str, str, str, str]]:
    workers = result["workers"]
    made = "" if result["namespaces"] else " (no namespace could be made here!)"
    return [
        (f"isolation: first step, {workers} workers: warm %%worker without a namespace", f"{result['open']:.2f} s",
         "baseline", ""),
        (f"isolation: first step, {workers} workers: warm %%worker in a private network namespace{made}",
         f"{result['isolated']:.2f} s", f"{result['ratio']:.2f}x", "one holder process per run; setns per worker"),
        ("isolation: a run's namespace holder started and ready (in the kernel)", f"{result['holder'] * 1000:.0f} ms",
         "", "the whole added cost but a setns per worker"),
    ]
