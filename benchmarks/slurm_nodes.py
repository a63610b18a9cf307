"""Two Slurm nodes on one machine: the test Slurm of the tests (tests/slurm_cluster.py: munged, slurmctld and
``slurmd -N n1`` / ``-N n2`` on 127.0.0.1; ``make slurm-deps`` installs Debian's packages; root only), called from
``benchmarks/run.py`` (``--only slurm``). One two-node allocation (``salloc -N2 --no-shell``) for the whole section;
per repetition, side by side (interleaved, so that the ratios see the same load):

- hand: ``srun --jobid=JOB -N2 -n2 --overlap`` of ``workload.py``, each task's ``TF_CONFIG`` composed from its
  ``SLURM_PROCID`` and ports chosen before the launch, as the TensorFlow tutorial composes it per worker, each task's
  output to a file of its own (``srun --output``), to the first step of every task; run before the cold and warm
  cells and again after them, the baseline being the mean of the two (on this shared machine the load moves by
  2-3x within a minute);
- cold: a fresh kernel inside the allocation (``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``), its first
  ``%%worker -n 2 --backend slurm`` cell of the same script, to the first step of every worker (target <= 1.2x);
- warm: the same cell again in that kernel, once the first has ended (target <= 0.4x);
- spawned: the cell in a fresh kernel with zygotes off (``NBWORKERS_ZYGOTE=0``): each worker a fresh interpreter in
  its step, as every run was before the zygote steps (a warm run of that kernel costs the same).

Each worker's log says whether it was forked from its node's zygote step (``--- nbworkers: forked from zygote``).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the test Slurm

WORKERS = 2
TARGET_COLD = 1.2
TARGET_WARM = 0.4
FORKED_LINE = "--- nbworkers: forked from zygote"
# Each task of the hand step: TF_CONFIG from its SLURM_PROCID (what SlurmClusterResolver reads too), then the script.
TASK_PRELUDE = ("import json, os, runpy, sys\n"
                "hosts = sys.argv[1].split(',')\n"
                "os.environ['TF_CONFIG'] = json.dumps({'cluster': {'worker': hosts}, 'task': {'type': 'worker', "
                "'index': int(os.environ['SLURM_PROCID'])}})\n"
                "sys.argv = sys.argv[2:]\n"
                "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def _hand(cluster, job: str, workdir: Path, env: dict, python: str, workload: Path, wait_first_steps,
          free_ports) -> float:
    for old in workdir.glob("slurm_job_*.log"):
        old.unlink()
    hosts = ",".join(f"127.0.0.1:{port}" for port in free_ports(WORKERS))
    paths = [workdir / f"slurm_job_{i}.log" for i in range(WORKERS)]
    command = ["srun", f"--jobid={job}", f"--nodes={WORKERS}", f"--ntasks={WORKERS}", "--ntasks-per-node=1",
               "--overlap", "--quiet", f"--output={workdir}/slurm_job_%t.log",
               python, "-c", TASK_PRELUDE, hosts, str(workload)]
    t0 = time.time()
    srun = subprocess.Popen(command, cwd=workdir, env={**env, **cluster.env, "TF_USE_LEGACY_KERAS": "1"},
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        steps = wait_first_steps(paths)
        srun.wait(timeout=300)
    finally:
        if srun.poll() is None:
            srun.kill()
            srun.wait()
    texts = [p.read_text(errors="replace") for p in paths]
    if not all("DONE" in text for text in texts):
        raise RuntimeError(f"the hand srun did not finish: {[t[-500:] for t in texts]}")
    return max(steps) - t0


def _cell(name: str, workload: Path) -> str:
    return (f"%%worker -n {WORKERS} --backend slurm --name {name} --env TF_USE_LEGACY_KERAS=1\n"
            + workload.read_text())


def _run(kernel, name: str, run_root: Path, workload: Path, wait_first_steps) -> tuple[float, int]:
    """Seconds from executing the cell to every worker's first step; how many workers were forked."""
    paths = [run_root / name / f"worker-{i}.log" for i in range(WORKERS)]
    t0 = time.time()
    error = kernel.collect(kernel.send(_cell(name, workload)), 300).error_line
    if error:
        raise RuntimeError(f"%%worker failed: {error}")
    steps = wait_first_steps(paths)
    kernel.output(f"%workers wait {name} --timeout 300")
    status = kernel.value(f"nbworkers.get_cluster({name!r}).status")
    if status != "finished":
        raise RuntimeError(f"cluster {name} ended {status}: "
                           + str(kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()['error']")))
    forked = sum(FORKED_LINE in p.read_text(errors="replace") for p in paths)
    return max(steps) - t0, forked


def _steps(cluster, job: str) -> list[str]:
    return cluster.client("squeue", "-h", "-s", "-j", job, "-o", "%i %j").stdout.split("\n")


def bench(tmp: Path, handdir: Path, env: dict, reps: int, *, BenchKernel, wait_first_steps, free_ports, log,
          python: str, workload: Path) -> dict:
    from slurm_cluster import missing_commands, running_cluster

    if missing_commands() or os.geteuid() != 0:
        return {"skipped": "needs root and Slurm's packages (make slurm-deps)"}
    notebook = tmp / "slurm-notebook"
    notebook.mkdir(exist_ok=True)
    result: dict = {"reps": []}
    with running_cluster() as cluster:
        granted = cluster.client("salloc", "-N2", "--no-shell", "-J", "nbw-bench", "--time=60", timeout=60)
        found = re.search(r"Granted job allocation (\d+)", granted.stderr)
        if not found:
            raise RuntimeError(f"salloc: {granted.stderr}")
        job = found.group(1)
        nodelist = cluster.client("squeue", "-h", "-j", job, "-o", "%N").stdout.strip()
        inside = {**cluster.env, "SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": nodelist, "SLURM_NNODES": "2"}
        try:
            for rep in range(reps):
                row = {"hand": _hand(cluster, job, handdir, env, python, workload, wait_first_steps, free_ports)}
                log(f"slurm: hand srun -N2 -n2 {row['hand']:.2f} s")
                run_root = tmp / f"slurm-runs-{rep}"
                run_root.mkdir(mode=0o700)
                kernel = BenchKernel(notebook, {**env, **inside, "NBWORKERS_RUN_ROOT": str(run_root),
                                                "NBWORKERS_ZYGOTE_PREWARM": "0"})
                try:
                    for run in ("cold", "warm"):
                        seconds, forked = _run(kernel, f"slurm-{run}-{rep}", run_root, workload, wait_first_steps)
                        row[run], row[f"{run}_forked"] = seconds, forked
                        log(f"slurm {run}: {seconds:.2f} s to the first step ({forked}/{WORKERS} forked), "
                            f"{seconds / row['hand']:.2f}x hand")
                finally:
                    kernel.shutdown()
                deadline = time.monotonic() + 30  # the kernel's end ends its steps (their srun's stdin)
                while any(line.split()[-1].startswith("nbw") for line in _steps(cluster, job) if line.split()) and (
                        time.monotonic() < deadline):
                    time.sleep(0.2)
                row["steps_left"] = [line for line in _steps(cluster, job) if line.strip()]
                after = _hand(cluster, job, handdir, env, python, workload, wait_first_steps, free_ports)
                log(f"slurm: hand srun -N2 -n2 again {after:.2f} s")
                row["hands"], row["hand"] = [row["hand"], after], (row["hand"] + after) / 2
                kernel = BenchKernel(notebook, {**env, **inside, "NBWORKERS_RUN_ROOT": str(run_root),
                                                "NBWORKERS_ZYGOTE": "0"})
                try:
                    row["spawned"], _ = _run(kernel, f"slurm-spawned-{rep}", run_root, workload, wait_first_steps)
                    log(f"slurm spawned (zygotes off): {row['spawned']:.2f} s, {row['spawned'] / row['hand']:.2f}x")
                finally:
                    kernel.shutdown()
                result["reps"].append(row)
        finally:
            cluster.client("scancel", job)
    return result


def rows(result: dict) -> list[tuple[str, str, str, str]]:
    if "skipped" in result:
        return [("slurm, 2 nodes: not measured", "", "", result["skipped"])]
    reps = result["reps"]

    def median(key: str) -> float:
        return statistics.median(r[key] for r in reps)

    def ratio(key: str) -> float:
        return statistics.median(r[key] / r["hand"] for r in reps)

    out = [(f"slurm, 2 nodes: first step, {WORKERS} workers: hand `srun -N2 -n2` (TF_CONFIG per task)",
            f"{median('hand'):.2f} s", "baseline", "")]
    for run, text, target in (("cold", "a fresh kernel's first `%%worker --backend slurm` cell", TARGET_COLD),
                              ("warm", "the same cell again", TARGET_WARM)):
        forked = min(r[f"{run}_forked"] for r in reps)
        verdict = "met" if ratio(run) <= target else "**missed**"
        out.append((f"slurm, 2 nodes: {text} ({forked}/{WORKERS} forked)", f"{median(run):.2f} s",
                    f"{ratio(run):.2f}x hand", f"<= {target:g}x: {verdict}"))
    out.append(("slurm, 2 nodes: zygotes off, each worker spawned in its step (as before the zygote steps)",
                f"{median('spawned'):.2f} s", f"{ratio('spawned'):.2f}x hand", ""))
    left = [r["steps_left"] for r in reps if r["steps_left"]]
    if left:
        out.append(("slurm, 2 nodes: job steps left 30 s after the kernel's shutdown", str(left), "", "**missed**"))
    return out


def details(result: dict) -> str:
    runs = ", ".join(f"{'+'.join(f'{h:.2f}' for h in r.get('hands', [r['hand']]))} / {r['cold']:.2f} / "
                     f"{r['warm']:.2f} / {r['spawned']:.2f}" for r in result["reps"])
    return ("- slurm, 2 nodes (the test Slurm: munged, slurmctld, slurmd n1 and n2 on 127.0.0.1, these 2 cores), per "
            f"repetition hand before+after / cold / warm / spawned (s): {runs}")


if __name__ == "__main__":  # a quick look by hand: python benchmarks/slurm_nodes.py [REPS]
    import tempfile

    from harness import PY, WORKLOAD, BenchKernel, base_env, log, wait_first_steps

    from nbworkers.magics.launch.ports import pick_free_ports

    with tempfile.TemporaryDirectory(prefix="nbworkers-bench-slurm-") as name:
        hand = Path(name) / "hand"
        hand.mkdir()
        got = bench(Path(name), hand, base_env(), int(sys.argv[1]) if len(sys.argv) > 1 else 1,
                    BenchKernel=BenchKernel, wait_first_steps=wait_first_steps, free_ports=pick_free_ports, log=log,
                    python=PY, workload=WORKLOAD)
        print(json.dumps(got, indent=1))
        for row in rows(got):
            print(" | ".join(row))
