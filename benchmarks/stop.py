"""Stop (``--only stop``): ``%workers stop`` of 2 workers in a loop, a plain one and one calling ``report()``
(TensorFlow imported: its first op starts TensorFlow's runtime), from the command to the run's end; with each
worker's exit code and whether its ``finally:`` ran.

Before the stop began with SIGINT (commit 72e38d0), measured by hand on this machine: a plain loop 0.4-0.5 s, every
worker killed by SIGTERM (-15) and no ``finally:`` run; a ``report()`` loop 5.4-5.6 s, every worker killed by
SIGKILL (-9) after the whole stop grace (TensorFlow's own SIGTERM handler swallowed the SIGTERM).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from harness import BenchKernel, median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the stop test's cell (tests/cells.py)
from cells import LOOP_WITH_FINALLY, worker_cell  # noqa: E402

from nbworkers.kernel_driver import wait_until

LOOPS = {"plain": ("pass", "pass"),
         "report()": ("import tensorflow", "distlib.report(step=step, loss=1.0 / step)")}
TARGET_STOP_S = 1.0  # the bound for a worker that is not inside a collective


def bench(kernel: BenchKernel, tmp: Path, reps: int, log) -> dict:
    result: dict = {}
    for label, (setup, body) in LOOPS.items():
        runs = []
        for rep in range(reps):
            name = f"stop-{'plain' if label == 'plain' else 'report'}-{rep}"
            marker = str(tmp / name)
            loop = LOOP_WITH_FINALLY.format(setup=setup, body=body, marker=marker)
            kernel.output(worker_cell(f"-n 2 --name {name}", loop))
            cluster = f"nbworkers.get_cluster({name!r})"
            wait_until(lambda: kernel.value(f"{cluster}.logs().count('worker up')") == 2, 300)
            if label != "plain":  # past the first report: TensorFlow's runtime started
                wait_until(lambda: kernel.value(f"all(w['step'] for w in {cluster}.snapshot()['workers'])"), 300)
            time.sleep(1.0)
            started = time.monotonic()
            kernel.output(f"%workers stop {name}")
            took = time.monotonic() - started
            snap = kernel.value(f"{cluster}.snapshot()")
            codes = [w["exit_code"] for w in snap["workers"]]
            finals = sum(Path(f"{marker}-finally-{i}").exists() for i in range(2))
            runs.append({"seconds": took, "codes": codes, "finally": finals, "status": snap["status"]})
            log(f"stop of a {label} loop: {took:.2f} s, {snap['status']}, exit codes {codes}, "
                f"finally ran on {finals}/2")
        result[label] = {"median": median(r["seconds"] for r in runs), "runs": runs}
    return result


def rows(result: dict) -> list[tuple[str, str, str, str]]:
    out = []
    for label, figures in result.items():
        last = figures["runs"][-1]
        seconds = figures["median"]
        out.append((f"stop: %workers stop of 2 workers in a {label} loop",
                    f"{seconds:.2f} s", f"exit codes {last['codes']}, finally ran {last['finally']}/2",
                    f"<= {TARGET_STOP_S:g} s: " + ("met" if seconds <= TARGET_STOP_S else "**missed**")))
    return out
