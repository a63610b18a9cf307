"""Many machines on one: a simulated Ray cluster as the tests' (tests/ray_helpers.py), a head without CPUs and three
one-CPU nodes, each its own raylet, but on loopback addresses of its own (127.0.0.20, .21-.23: never beside the
tests' cluster at 127.0.0.1-.4), called from ``benchmarks/run.py`` (``--only ray_nodes``; with
``NBW_BENCH_RAY_AT_ONCE=1`` the hand launch and the cold-at-once run alone). Side by side, per repetition (interleaved, so that the ratios see the same
load):

- hand: the TensorFlow tutorial's launch of ``workload.py``, 3 workers (``TF_CONFIG`` + ``python main.py &``),
  to the first step of every worker (the baseline);
- old path: ``%%worker -n 3 --backend ray --spread`` with the actor pool off (``RaySettings.pool_idle_timeout =
  0``) and nothing prewarmed: cold (a fresh kernel's first run: one worker per node, each spawned, each node's
  zygote starting as the run ends) and warm (the same cell again once the zygotes are ready: a new placement group
  and a new actor process per worker, each worker forked from its node's zygote);
- pool: the defaults, in a kernel started with ``RAY_ADDRESS`` set (and the cell's ``TF_USE_LEGACY_KERAS=1`` in its
  environment, so that the zygotes prewarmed are the cell's): cold (``%load_ext`` connected to Ray and started every
  node's zygote and a spare worker host there, ``groups/spares.py``; the first cell, once the zygotes are ready, as
  when a user takes a few seconds to write it: a new placement group, its workers hosted by the spares, every worker
  forked) and warm (the same cell again: the group and actors the first run left idle, every worker forked);

- at once: a fresh kernel with the defaults and no ``RAY_ADDRESS`` (nothing of Ray prewarmed; the local zygote's
  prewarm starts at ``%load_ext``, as for any user), ``%load_ext nbworkers`` and at once the cell, the cluster named
  only there (``--address``): the kernel imports and connects Ray, places the group, starts one actor process per
  worker, and each worker is spawned (a node's one worker would wait as long for a new zygote's import);

then, once: ``-n 2 --spread`` on the three nodes, a long run, ``kill -9`` of worker 1's node (its raylet's
process group) -> the first step of the group restarted on the two nodes left (forked there). That includes
Ray declaring the node dead: here after 3 missed health checks a second apart (``FAST_NODE_DEATH_ENV``; Ray's
default is 5 every 3 s after 5 s).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the simulated cluster the tests use

WORKERS = 3
HEAD_IP = "127.0.0.20"  # the benchmark's cluster, apart from the tests' (127.0.0.1-.4)
NODE_IPS = ("127.0.0.21", "127.0.0.22", "127.0.0.23")


def _cell(address: str, name: str, workers: int = WORKERS, extra: str = "") -> str:
    workload = (HERE / "workload.py").read_text()
    return (f"%%worker -n {workers} --backend ray --address {address} --spread --name {name} "
            f"--env TF_USE_LEGACY_KERAS=1 {extra}\n" + workload)


def _first_step(kernel, cell: str, paths: list[Path], wait_first_steps, timeout: float = 600) -> tuple[float, int]:
    """Seconds from executing the cell to every worker's first step; how many were forked."""
    t0 = time.time()
    result = kernel.collect(kernel.send(cell), timeout)
    if result.error_line or result.status == "error":  # a UsageError (a LaunchError) has no error line
        raise RuntimeError(f"%%worker failed: {result.error_line or result.stderr.strip()}")
    steps = wait_first_steps(paths, timeout=timeout)
    forked = sum("--- nbworkers: forked from zygote" in p.read_text(errors="replace") for p in paths)
    return max(steps) - t0, forked


def _runs(BenchKernel, notebook: Path, run_root: Path, env: dict, address: str, pool: bool, tag: str,
          wait_first_steps, log) -> dict:
    if pool:  # prewarmed at %load_ext: Ray connected, every node's zygote started (backends/ray/groups/prewarm.py)
        kernel_env = {"RAY_ADDRESS": address, "TF_USE_LEGACY_KERAS": "1", "NBWORKERS_ZYGOTE_PREWARM": "1"}
    else:
        kernel_env = {"NBWORKERS_ZYGOTE_PREWARM": "0"}
    kernel = BenchKernel(notebook, {**env, "NBWORKERS_RUN_ROOT": str(run_root), "NBWORKERS_ZYGOTE": "1",
                                    **kernel_env})
    out = {}
    try:
        if not pool:
            kernel.output("nbworkers.settings().config.RaySettings.pool_idle_timeout = 0")
        for run in ("cold", "warm"):
            if run == "warm" or pool:  # as a user writing the next (or, prewarmed, the first) cell
                waited = _wait_node_zygotes_ready(run_root, WORKERS)
                if pool and run == "cold":  # %load_ext prewarmed the local zygote too: not beside the measure
                    _wait_local_zygote_ready(kernel)
                out.setdefault("zygotes_ready_after", waited)
                log(f"ray nodes, {tag}: the node zygotes were ready {waited:.1f} s before the {run} run")
            name = f"ray-{tag}-{run}"
            paths = [run_root / name / f"worker-{i}.log" for i in range(WORKERS)]
            seconds, forked = _first_step(kernel, _cell(address, name), paths, wait_first_steps)
            kernel.output(f"%workers wait {name} --timeout 300")
            out[run], out[f"{run}_forked"] = seconds, forked
            if run == "warm":
                out["warm_pooled"] = kernel.value(
                    f"[p['actor_pid'] for p in nbworkers.get_cluster('ray-{tag}-warm').backend.placements] =="
                    f" [p['actor_pid'] for p in nbworkers.get_cluster('ray-{tag}-cold').backend.placements]")
            log(f"ray nodes, {tag} {run}: {seconds:.2f} s to the first step ({forked}/{WORKERS} forked)"
                + (f", the same actors: {out['warm_pooled']}" if run == "warm" else ""))
    finally:
        kernel.shutdown()
    return out


def _wait_local_zygote_ready(kernel, timeout: float = 120) -> None:
    logs = kernel.value("[z['log'] for z in __import__('nbworkers.magics.backends.zygotes', fromlist=['z'])"
                        ".zygotes().describe()]")
    deadline = time.monotonic() + timeout
    while not all(": ready (" in Path(p).read_text(errors="replace") for p in logs):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the prewarmed local zygote is not ready: {logs}")
        time.sleep(0.2)


def _wait_node_zygotes_ready(run_root: Path, count: int, timeout: float = 120) -> float:
    """Seconds until ``count`` node zygotes marked with ``run_root`` said ``ready`` in their logs (started as the
    cold run ended, or by ``%load_ext`` with ``RAY_ADDRESS`` set)."""
    import psutil

    started = time.monotonic()
    while time.monotonic() - started < timeout:
        ready = 0
        for proc in psutil.process_iter(["cmdline", "environ"]):
            try:
                command = proc.info["cmdline"] or []
                if "nbworkers-ray-zygote" not in " ".join(command) or "--socket" not in command:
                    continue
                if (proc.info["environ"] or {}).get("NBWORKERS_SPARE") != str(run_root):
                    continue
                log_file = Path(command[command.index("--socket") + 1]).with_suffix(".log")
                ready += ": ready (" in log_file.read_text(errors="replace")
            except (psutil.Error, OSError, ValueError, IndexError):
                continue
        if ready >= count:
            return time.monotonic() - started
        time.sleep(0.2)
    raise TimeoutError(f"the node zygotes were not ready within {timeout} s")


def _at_once(BenchKernel, notebook: Path, run_root: Path, env: dict, address: str, tag: str, wait_first_steps,
             log) -> tuple[float, int]:
    """A fresh kernel's first cell right after ``%load_ext`` (BenchKernel loads it), the address only in the cell."""
    kernel = BenchKernel(notebook, {**env, "NBWORKERS_RUN_ROOT": str(run_root), "NBWORKERS_ZYGOTE": "1"})
    name = f"ray-{tag}-at-once"
    paths = [run_root / name / f"worker-{i}.log" for i in range(WORKERS)]
    try:
        seconds, forked = _first_step(kernel, _cell(address, name), paths, wait_first_steps)
        kernel.output(f"%workers wait {name} --timeout 300")
    finally:
        kernel.shutdown()
    log(f"ray nodes, {tag}: cold at once {seconds:.2f} s to the first step ({forked}/{WORKERS} forked); what it left "
        f"{_wait_gone(run_root)}")
    return seconds, forked


RAY_WORKER_SCRIPTS = ("default_worker.py", "setup_worker.py")  # a Ray worker process, or one being set up
SETTLED_FOR = 3.0  # seconds with nothing left before the next measure


def _wait_gone(run_root: Path, timeout: float = 60) -> str:
    """How long until nothing the at-once kernel started is left, and nothing for ``SETTLED_FOR`` seconds on end: its
    run's processes, the node zygotes its run's end started (marked with ``run_root``), and any Ray worker process
    on the benchmark's nodes (the node zygotes' actors start after the run ends; one set up for a ``runtime_env``
    imports Ray twice, ~3.6 s of CPU each, and outlives the kernel by some seconds). Or what was left after
    ``timeout``. The next repetition's hand launch must not share the cores with them: it did, and took 10.3 s
    after an at-once run against 6.7 s before the first (2026-11-29)."""
    import psutil

    started = time.monotonic()
    quiet_since = None
    left: list = []
    while time.monotonic() - started < timeout:
        left = []
        for proc in psutil.process_iter(["cmdline", "environ"]):
            try:
                args = proc.info["cmdline"] or []
                command = " ".join(args)
                marked = (proc.info["environ"] or {}).get("NBWORKERS_SPARE") == str(run_root)
                ours = any(f"--node-ip-address={ip} " in command + " " for ip in (HEAD_IP, *NODE_IPS))
                ray_worker = len(args) > 1 and args[1].endswith(RAY_WORKER_SCRIPTS)  # (a raylet's command names both)
                if marked or str(run_root) in command or (ray_worker and ours):
                    left.append(command[:100])
            except psutil.Error:
                continue
        now = time.monotonic()
        if left:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= SETTLED_FOR:
            return f"gone {quiet_since - started:.1f} s after its kernel"
        time.sleep(0.2)
    return f"{len(left)} left {timeout:g} s after its kernel: {sorted(set(left))[:3]}"


def _cluster():
    """The tests' simulated cluster (tests/ray_helpers.py), its head at HEAD_IP instead of 127.0.0.1."""
    from conftest import wait_until
    from ray_helpers import FAST_NODE_DEATH_ENV, RAY_NODES_TIMEOUT, RayTestCluster, free_port

    class BenchCluster(RayTestCluster):
        def start(self) -> "BenchCluster":
            self.address = self._start_node("head", [
                "--head", "--node-ip-address", HEAD_IP, "--port", str(free_port()), "--num-cpus", "0",
                "--include-dashboard", "false", "--ray-client-server-port", str(free_port()),
            ], r"ray start --address='([^']+)'", dict(self.env, **FAST_NODE_DEATH_ENV)).group(1)
            for ip in self.node_ips:
                self.add_node(ip, wait=False)
            assert wait_until(lambda: self.alive_nodes() == 1 + len(self.node_ips), RAY_NODES_TIMEOUT, interval=2), \
                "not every node of the benchmark's Ray cluster joined"
            return self

    return BenchCluster(NODE_IPS, head_cpus=0).start()


def _node_kill(BenchKernel, notebook: Path, run_root: Path, env: dict, nodes, wait_first_steps, log) -> float:
    kernel = BenchKernel(notebook, {**env, "NBWORKERS_RUN_ROOT": str(run_root), "NBWORKERS_ZYGOTE_PREWARM": "0"})
    name = "ray-node-kill"
    paths = [run_root / name / f"worker-{i}.log" for i in range(2)]
    try:
        _first_step(kernel, _cell(nodes.address, name, 2, "--env BENCH_STEPS=1000000 --env BENCH_STEP_DELAY=0.05"),
                    paths, wait_first_steps)
        lost = kernel.value(f"nbworkers.get_cluster({name!r}).backend.placements[1]['ip']")
        t_kill = time.time()
        nodes.kill_node(lost)
        steps = wait_first_steps(paths, timeout=300, after="launch 1,")
        history = kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()['restart_history']")
        kernel.output(f"%workers stop {name}")
        seconds = max(steps) - t_kill
        detected = history[0]["time"] - t_kill if history else float("nan")
        log(f"ray nodes: node {lost} killed -> first resumed step {seconds:.2f} s ({history[0]['kind']}; "
            f"the restart began {detected:.2f} s after the kill)")
        nodes.add_node(lost)
        return seconds
    finally:
        kernel.shutdown()


def bench(tmp: Path, handdir: Path, env: dict, reps: int, *, BenchKernel, hand_launch, wait_first_steps,
          log) -> dict:
    import os

    from ray_helpers import RAY_TEST_ENV

    env = {**env, **RAY_TEST_ENV}
    notebook = tmp / "ray-notebook"
    notebook.mkdir(exist_ok=True)
    result: dict = {"reps": [], "load": []}
    at_once_only = os.environ.get("NBW_BENCH_RAY_AT_ONCE") == "1"  # the hand launch and the at-once run alone
    nodes = _cluster()
    try:
        for rep in range(reps):
            result["load"].append(os.getloadavg()[0])
            row = {"hand": hand_launch(WORKERS, handdir, env)}
            log(f"ray nodes: hand launch of {WORKERS} workers {row['hand']:.2f} s (load {result['load'][-1]:.1f})")
            run_root = tmp / f"ray-runs-{rep}-at-once"
            run_root.mkdir(mode=0o700)
            row["at_once"], row["at_once_forked"] = _at_once(BenchKernel, notebook, run_root, env, nodes.address,
                                                             f"r{rep}", wait_first_steps, log)
            if at_once_only:
                result["reps"].append(row)
                continue
            for pool, tag in ((False, "old"), (True, "pool")):
                run_root = tmp / f"ray-runs-{rep}-{tag}"  # each kernel's zygotes marked apart
                run_root.mkdir(mode=0o700)
                runs = _runs(BenchKernel, notebook, run_root, env, nodes.address, pool, tag, wait_first_steps, log)
                row.update({f"{tag}_{k}": v for k, v in runs.items()})
            result["reps"].append(row)
        if at_once_only:
            return result
        run_root = tmp / "ray-runs-kill"
        run_root.mkdir(mode=0o700)
        result["node_kill"] = _node_kill(BenchKernel, notebook, run_root, env, nodes, wait_first_steps, log)
    finally:
        nodes.stop()
    return result


def rows(result: dict) -> list[tuple[str, str, str, str]]:
    import statistics

    def median(key: str) -> float:
        return statistics.median(r[key] for r in result["reps"])

    def ratio(key: str) -> float:
        return statistics.median(r[key] / r["hand"] for r in result["reps"])

    out = [(f"ray, 3 nodes: first step, {WORKERS} workers: hand launch", f"{median('hand'):.2f} s", "baseline", "")]
    if all("at_once" in r for r in result["reps"]):
        forked = min(r["at_once_forked"] for r in result["reps"])
        met = "met" if ratio("at_once") <= 1.0 else "NOT met"
        out.append((f"ray, 3 nodes: cold at once, the first cell right after %load_ext, --address in the cell"
                    f" ({forked}/{WORKERS} forked)", f"{median('at_once'):.2f} s", f"{ratio('at_once'):.2f}x hand",
                    f"<= 1x: {met}"))
    if not all("old_cold" in r for r in result["reps"]):
        return out
    words = {("old", "cold"): "old path (pool off, nothing prewarmed): cold, a fresh kernel's first run",
             ("old", "warm"): "old path: warm, node zygotes ready, a new placement group and actors",
             ("pool", "cold"): "pool: cold, node zygotes and spare hosts prewarmed at %load_ext (RAY_ADDRESS), a new group",
             ("pool", "warm"): "pool: warm, the idle group's live actors"}
    targets = {("pool", "cold"): 1.0, ("pool", "warm"): 0.4}
    for (tag, run), text in words.items():
        forked = min(r[f"{tag}_{run}_forked"] for r in result["reps"])
        target = targets.get((tag, run))
        verdict = "" if target is None else f"<= {target:g}x: {'met' if ratio(f'{tag}_{run}') <= target else 'NOT met'}"
        out.append((f"ray, 3 nodes: {text} ({forked}/{WORKERS} forked)", f"{median(f'{tag}_{run}'):.2f} s",
                    f"{ratio(f'{tag}_{run}'):.2f}x hand", verdict))
    if not all(r.get("pool_warm_pooled") for r in result["reps"]):
        out.append(("ray, 3 nodes: pool: a warm run did NOT reuse the cold run's actors", "", "", "NOT met"))
    if "node_kill" in result:
        out.append(("ray, 3 nodes: kill -9 of a node -> first resumed step (2 workers, a spare node; includes Ray's "
                    "3 s node-death detection)", f"{result['node_kill']:.2f} s", "", ""))
    return out
