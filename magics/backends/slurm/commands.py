"""The Slurm backend's pure parts: where each worker goes, the command lines of its job steps, and what Slurm's
commands answer, read. No I/O here (``allocation.py`` runs the commands; unit-tested in tests/unit/test_slurm.py).

One job step per worker (``srun --nodes=1 --ntasks=1 --nodelist=NODE``), not one step of N tasks: each worker's step
has its own stdin (its host's ``stop``/``stacks`` commands and the end of file that means "the kernel is gone"), its
own exit code, and can be cancelled, lost and started again alone; a step of N tasks shares one stdin, ends as a
whole and reports one code.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

# Variables srun reads as its own options' defaults (SLURM_NTASKS, SLURM_CPUS_PER_TASK, SLURM_MEM_PER_CPU, ...):
# the kernel's allocation sets them for its own shape, so a worker's step would inherit the wrong one. Each step's
# own SLURM_* reach its task from slurmstepd. SLURM_CONF stays: it says which cluster the commands talk to.
SRUN_INPUT_PREFIXES = ("SLURM_", "SRUN_", "SALLOC_", "SBATCH_")
KEPT_SLURM_VARIABLES = frozenset({"SLURM_CONF"})
STEP_NAME_PREFIX = "nbw-"
ZYGOTE_STEP_PREFIX = "nbwz-"  # a node's zygote step (zygote_steps.py), apart from the workers' steps
PROBE_MARK = "nbworkers-ports"
# slurmstepd's line when a step is cancelled under its task (scancel, the job's end): "*** STEP 12.3 ON n2 CANCELLED"
CANCELLED_LINE = re.compile(r"\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED")
LOOPBACK_PREFIX = "127."

# Run on each node by the probe step (``probe_command``): as many free TCP ports as that node's workers need, all
# bound at once so they differ, then freed for the workers' TensorFlow servers (``launch/ports.py``: the same race,
# handled the same way: a server that lost its port restarts the group on fresh ones). Standard library only.
PROBE_CODE = (
    "import os, socket, sys\n"
    "counts = dict(item.split('=') for item in sys.argv[1].split(','))\n"
    "node = os.environ.get('SLURMD_NODENAME', '')\n"
    "held = []\n"
    "for _ in range(int(counts.get(node, 0))):\n"
    "    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
    "    s.bind(('0.0.0.0', 0))\n"
    "    held.append(s)\n"
    f"print({PROBE_MARK!r}, node, *[s.getsockname()[1] for s in held], flush=True)\n"
)


def step_env(env: Mapping[str, str]) -> dict[str, str]:
    """A worker's environment for its ``srun``: without the kernel's allocation variables (``SRUN_INPUT_PREFIXES``)."""
    return {k: v for k, v in env.items() if not k.startswith(SRUN_INPUT_PREFIXES) or k in KEPT_SLURM_VARIABLES}


def step_name(run_id: str, generation: int | str, index: int) -> str:
    """The job step's name (``squeue -s`` shows it; ``allocation.step_id`` finds the step by it)."""
    return f"{STEP_NAME_PREFIX}{run_id[:12] or 'run'}-g{generation}-w{index}"


def zygote_step_name(node: str, key: str) -> str:
    """A node's zygote step's name: one per node and import-time key (``zygote_steps.py``)."""
    return f"{ZYGOTE_STEP_PREFIX}{node}-{key[:8]}"


def place(nodes: Sequence[str], count: int, spread: bool = False, tasks_per_node: int | None = None) -> list[str]:
    """The node of each of ``count`` workers, in order: in turn over ``nodes`` (worker i on node i mod M), at most one
    per node (``spread``), or filling each node with ``tasks_per_node`` before the next. ``ValueError`` says why not."""
    if not nodes:
        raise ValueError("the allocation has no nodes (SLURM_JOB_NODELIST is empty)")
    where = f"the allocation has {len(nodes)} node{'s' * (len(nodes) != 1)} ({', '.join(nodes)})"
    if spread:
        if count > len(nodes):
            raise ValueError(f"--spread: {count} workers need {count} nodes, and {where}. Use fewer workers, drop "
                             "--spread, or ask for a larger allocation (salloc -N).")
        return list(nodes[:count])
    if tasks_per_node is not None:
        if tasks_per_node < 1:
            raise ValueError(f"--tasks-per-node {tasks_per_node}: give 1 or more.")
        if count > tasks_per_node * len(nodes):
            raise ValueError(f"--tasks-per-node {tasks_per_node}: {count} workers need "
                             f"{-(-count // tasks_per_node)} nodes, and {where}. Use fewer workers or more per node.")
        return [nodes[i // tasks_per_node] for i in range(count)]
    return [nodes[i % len(nodes)] for i in range(count)]


def counts_of(placed: Sequence[str]) -> dict[str, int]:
    """How many workers each node holds, in the order the nodes first appear."""
    counts: dict[str, int] = {}
    for node in placed:
        counts[node] = counts.get(node, 0) + 1
    return counts


def srun_command(job_id: str, node: str, name: str, command: Sequence[str], gpus_per_task: int = 0) -> list[str]:
    """One worker's job step: one task on ``node``. Steps share the allocation's CPUs (``--overlap``: a restart's
    steps never wait for the old ones to leave), but not its GPUs: a worker that asks for GPUs gets its own
    (``--gpus-per-task``; Slurm sets its ``CUDA_VISIBLE_DEVICES``)."""
    share = [f"--gpus-per-task={gpus_per_task}"] if gpus_per_task > 0 else ["--overlap"]
    return ["srun", f"--jobid={job_id}", "--nodes=1", "--ntasks=1", f"--nodelist={node}", f"--job-name={name}",
            *share, "--quiet", *command]


def probe_command(job_id: str, counts: Mapping[str, int], python: str) -> list[str]:
    """One step of one task per node of ``counts``: each prints ``PROBE_MARK NODENAME PORT...`` (``parse_probe``)."""
    nodes = list(counts)
    return ["srun", f"--jobid={job_id}", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
            f"--nodelist={','.join(nodes)}", f"--job-name={STEP_NAME_PREFIX}ports", "--overlap", "--quiet",
            python, "-I", "-c", PROBE_CODE, ",".join(f"{node}={n}" for node, n in counts.items())]


def parse_probe(text: str) -> dict[str, list[int]]:
    """``{SLURMD_NODENAME: [port, ...]}`` from the probe step's output (other lines ignored)."""
    found: dict[str, list[int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == PROBE_MARK and all(p.isdigit() for p in parts[2:]):
            found[parts[1]] = [int(p) for p in parts[2:]]
    return found


def parse_node_addrs(text: str) -> dict[str, str]:
    """``{NodeName: NodeAddr}`` from ``scontrol -o show node A,B`` (one line per node)."""
    addrs: dict[str, str] = {}
    for line in text.splitlines():
        name, addr = re.search(r"\bNodeName=(\S+)", line), re.search(r"\bNodeAddr=(\S+)", line)
        if name:
            addrs[name.group(1)] = addr.group(1) if addr else name.group(1)
    return addrs


def parse_step_id(text: str, name: str) -> str:
    """The step id (``12.3``) named ``name`` in ``squeue -h -s -o '%i %j'``'s output, or ""."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == name:
            return parts[0]
    return ""


def all_loopback(addrs: Sequence[str]) -> bool:
    """Is every node this machine's loopback (the tests' cluster: ``NodeAddr=127.0.0.1``)?"""
    return bool(addrs) and all(a.startswith(LOOPBACK_PREFIX) or a == "localhost" for a in addrs)


def step_cancelled(log_tail: str) -> bool:
    """Does a worker's log end with slurmstepd's word that its step was cancelled?"""
    return CANCELLED_LINE.search(log_tail) is not None


# --submit: the job that holds the new allocation runs this (sbatch --wrap, /bin/sh) while the kernel's heartbeat
# file is fresh: it ends by itself when the kernel is gone (even by kill -9), or when the kernel removes the file
# (and then removes a stale one).
HOLDER = ('hb={heartbeat}; while [ -e "$hb" ] && [ $(( $(date +%s) - $(stat -c %Y "$hb") )) -lt {stale} ]; '
          'do sleep {every}; done; rm -f "$hb"')
ENDED_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                          "DEADLINE", "OUT_OF_MEMORY", "COMPLETING", ""})


def nodes_to_ask(count: int, spread: bool, tasks_per_node: int | None) -> int:
    """--submit: how many nodes the workers need (one each, or ``tasks_per_node`` each)."""
    return -(-count // tasks_per_node) if tasks_per_node and not spread else count


def sbatch_command(name: str, nodes: int, heartbeat: str, stale: float, partition: str = "", time: str = "",
                   account: str = "", extra: Sequence[str] = (), gpus_per_node: int = 0) -> list[str]:
    """The job that holds a --submit allocation (``HOLDER``); ``sbatch --parsable`` prints its id at once."""
    holder = HOLDER.format(heartbeat=shlex.quote(heartbeat), stale=int(stale), every=max(1, int(stale // 10)))
    return ["sbatch", "--parsable", f"--job-name={STEP_NAME_PREFIX}{name}", f"--nodes={nodes}",
            "--ntasks-per-node=1", "--output=/dev/null",
            *([f"--partition={partition}"] if partition else []), *([f"--time={time}"] if time else []),
            *([f"--account={account}"] if account else []),
            *([f"--gpus-per-node={gpus_per_node}"] if gpus_per_node else []), *extra, f"--wrap={holder}"]


def parse_job_state(text: str) -> tuple[str, str, str]:
    """(state, reason, node list) from ``squeue -h -j J -o '%T|%r|%N'`` ("" each when the job is gone)."""
    parts = (text.strip().splitlines() or [""])[0].split("|")
    state, reason, nodelist = (parts + ["", "", ""])[:3]
    return state, reason, nodelist
