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
- many workers: the kernel's CPU, the widget's updates and a trivial cell's round trip with 64 simulated workers
  sending metrics and logs at a real worker's pace through the real relay, vs 2 (``benchmarks/many_workers.py``);
- cost of reporting: training steps/s with ``ReportCallback`` on vs off (one process, alternating fits), and
  the time spent inside ReportCallback's hooks as a share of the fits' time (the A/B comparison is limited by
  this shared machine's fit-to-fit noise; the share is not);
- recovery: ``kill -9`` of a worker to the first step of the restarted group;
- stop: ``%workers stop`` of a plain loop and of a ``report()`` loop, with exit codes and ``finally:`` (``stop.py``);
- saved state: one worker's error in a session to its ~100 MB of weights and optimizer slots restored, against
  the time to train to that point (``saved_state.py``);
- Slurm: two nodes of the test Slurm (tests/slurm_cluster.py, root only): a hand ``srun -N2 -n2`` of the script
  against the first ``%%worker -n 2 --backend slurm`` cell, a warm one and one with zygotes off
  (``slurm_nodes.py``);
- Keras on JAX: a ``%%worker -n 2 --framework jax`` cell's first step, cold and warm, and its steady steps/s
  against a hand launch of the same script (``jax_startup.py``; says so when jax or the flag is not there);
- memory: the kernel's resident size with a cluster running (the kernel never imports TensorFlow).

``--quick`` runs each once with smaller loads (about two minutes). The machine is shared: the load average
before and after is written beside the table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from harness import (
    HERE,
    WORKLOAD,
    BenchKernel,
    base_env,
    first_steps,
    hand_launch,
    kill_group,
    log,
    nbworkers_launch,
    wait_first_steps,
    worker_cell,
)
from recovery import bench_recovery
from relay import bench_relay
from reporting import bench_reporting_cost
from startup import bench_startup
from table import describe_machine, render

from nbworkers.kernel_driver import wait_until
from nbworkers.magics.launch.ports import pick_free_ports
from nbworkers.procs.strays import processes_under

RESULTS = HERE / "results.md"


def main() -> int:
    parser = argparse.ArgumentParser(description="nbworkers benchmarks (writes benchmarks/results.md)")
    parser.add_argument("--quick", action="store_true", help="one run each, smaller loads (about 2 minutes)")
    parser.add_argument("--reps", type=int, default=3, help="runs per start-up figure (default 3)")
    parser.add_argument("--sizes", default="", help="worker counts for start-up (default 2,4; --quick: 2)")
    parser.add_argument("--only", default="",
                        help="comma list of: startup,relay,many,reporting,recovery,keras_fit,sessions,data,zygote,isolation,"
                             "ray_nodes,stop,saved_state,jax,slurm")
    parser.add_argument("--output", default=str(RESULTS), help="where the table is written")
    args = parser.parse_args()
    if args.quick:
        args.reps = 1
    sizes = [int(s) for s in args.sizes.split(",") if s] or ([2] if args.quick else [2, 4])
    only = set(args.only.split(",")) if args.only else {"startup", "relay", "many", "reporting", "recovery",
                                                        "keras_fit", "sessions", "data", "zygote", "isolation",
                                                        "ray_nodes", "stop", "saved_state", "jax", "slurm"}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = os.getloadavg()
    t_start = time.monotonic()
    results: dict = {}
    env = base_env()
    with tempfile.TemporaryDirectory(prefix="nbworkers-bench-") as tmp_name:
        tmp = Path(tmp_name)
        run_root = tmp / "runs"
        run_root.mkdir(mode=0o700)  # a run root only we can write to (the kernel checks it)
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
            if "many" in only:  # 64 simulated workers through the real relay (benchmarks/many_workers.py)
                import many_workers

                results["many"] = many_workers.bench(kernel, tmp, seconds=10 if args.quick else 30,
                                                     backlog=400 if args.quick else many_workers.BACKLOG)
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
            if "data" in only:  # a session's push and pull of a 64 MiB array (benchmarks/data.py)
                import data

                results["data"] = data.bench(kernel, 3 if args.quick else 2 * args.reps + 1, log)
            if "zygote" in only:  # fork server start-up, warm, recovery, memory (benchmarks/zygote.py)
                import zygote

                results["zygote"] = zygote.bench(tmp, handdir, env, sizes, 1 if args.quick else args.reps,
                                                 BenchKernel=BenchKernel, hand_launch=hand_launch,
                                                 nbworkers_launch=nbworkers_launch, worker_cell=worker_cell,
                                                 wait_first_steps=wait_first_steps, log=log, workload=WORKLOAD,
                                                 free_ports=pick_free_ports)
            if "isolation" in only:  # private network namespaces' start-up cost (benchmarks/isolation.py)
                import isolation

                results["isolation"] = isolation.bench(notebook, tmp / "isolation-runs", env,
                                                       1 if args.quick else args.reps, BenchKernel=BenchKernel,
                                                       nbworkers_launch=nbworkers_launch, log=log)
            if "ray_nodes" in only:  # a simulated 3-node Ray cluster (benchmarks/ray_nodes.py)
                import ray_nodes

                results["ray_nodes"] = ray_nodes.bench(tmp, handdir, env, 1 if args.quick else args.reps,
                                                       BenchKernel=BenchKernel, hand_launch=hand_launch,
                                                       wait_first_steps=wait_first_steps, log=log)
            if "slurm" in only:  # two nodes of the test Slurm: hand srun vs --backend slurm (slurm_nodes.py)
                import slurm_nodes

                results["slurm"] = slurm_nodes.bench(tmp, handdir, env, 1 if args.quick else args.reps,
                                                     BenchKernel=BenchKernel, wait_first_steps=wait_first_steps,
                                                     free_ports=pick_free_ports, log=log, python=sys.executable,
                                                     workload=WORKLOAD)
            if "stop" in only:  # %workers stop of a plain and a report() loop (benchmarks/stop.py)
                import stop

                results["stop"] = stop.bench(kernel, tmp, 1 if args.quick else args.reps, log)
            if "saved_state" in only:  # one worker's error -> a ~100 MB state restored (benchmarks/saved_state.py)
                import saved_state

                results["saved_state"] = saved_state.bench(kernel, 1 if args.quick else args.reps, log)
            if "jax" in only:  # Keras on JAX, 2 processes: %%worker --framework jax vs a hand launch (jax_startup.py)
                import jax_startup

                results["jax"] = jax_startup.bench(tmp, handdir, env, 1 if args.quick else args.reps,
                                                   BenchKernel=BenchKernel, wait_first_steps=wait_first_steps,
                                                   kill_group=kill_group, log=log)
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
