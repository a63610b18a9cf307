"""The Slurm allocation a run's workers go into, and the Slurm commands that read and change it.

``Allocation.current()``: the one the kernel runs in (``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``, as salloc, sbatch,
batchspawner and Open OnDemand set them). Node names are expanded by Slurm itself (``scontrol show hostnames``),
their addresses read from ``scontrol show node`` (``NodeAddr``: what the workers' TensorFlow servers are reached at),
each node's free ports picked on that node by one short step (``commands.PROBE_CODE``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nbworkers.magics.backends.slurm import commands
from nbworkers.magics.errors import LaunchError

JOB_ID_ENV = "SLURM_JOB_ID"
NODELIST_ENV = "SLURM_JOB_NODELIST"


class SlurmError(LaunchError):
    """The Slurm backend cannot start the workers as asked; nothing was left running."""


def slurm_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment Slurm's commands run with: the kernel's, without its allocation's srun defaults."""
    return commands.step_env(os.environ if environ is None else environ)


def run(command: Sequence[str], timeout: float, what: str) -> str:
    """``command``'s output; ``SlurmError`` with Slurm's own words when it fails or does not answer in time."""
    if shutil.which(command[0]) is None:
        raise SlurmError(f"{command[0]}: not found. The Slurm backend needs Slurm's commands (srun, scontrol, squeue,"
                         " scancel) on the kernel's PATH: run the kernel on a node of the cluster.")
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, env=slurm_env(),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{what}: Slurm did not answer in {timeout:g} s ({' '.join(command[:3])} ...). Is slurmctld up"
                         " (`sinfo`)? Nothing was started.") from None
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}").splitlines()[-1]
        raise SlurmError(f"{what}: {said}. Nothing was started.")
    return done.stdout


def quiet(command: Sequence[str], timeout: float) -> str:
    """``command``'s output, or "" whatever goes wrong (looks and clean-ups that must not raise)."""
    try:
        return subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, env=slurm_env(),
                              stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


@dataclass(frozen=True)
class Allocation:
    """A running Slurm job whose nodes the workers' steps use."""

    job_id: str
    nodes: tuple[str, ...]
    addrs: Mapping[str, str]  # NodeName -> NodeAddr

    @classmethod
    def current(cls, timeout: float, environ: Mapping[str, str] | None = None) -> "Allocation":
        env = os.environ if environ is None else environ
        job_id = env.get(JOB_ID_ENV, "")
        if not job_id:
            raise SlurmError("--backend slurm: this kernel is not inside a Slurm allocation (no SLURM_JOB_ID). Start "
                             "the kernel inside one (salloc, sbatch, batchspawner, Open OnDemand), or add --submit to "
                             "ask Slurm for one (with --partition, --time, --account).")
        return cls.of_job(job_id, env.get(NODELIST_ENV, ""), timeout)

    @classmethod
    def of_job(cls, job_id: str, nodelist: str, timeout: float) -> "Allocation":
        if not nodelist:
            nodelist = run(["squeue", "-h", "-j", job_id, "-o", "%N"], timeout, f"job {job_id}'s nodes").strip()
        nodes = tuple(hostnames(nodelist, timeout))
        shown = run(["scontrol", "-o", "show", "node", ",".join(nodes)], timeout, f"job {job_id}'s node addresses")
        addrs = commands.parse_node_addrs(shown)
        return cls(job_id, nodes, {node: addrs.get(node, node) for node in nodes})

    def free_ports(self, counts: Mapping[str, int], timeout: float) -> dict[str, list[int]]:
        """``counts[node]`` free ports on each node, picked there (one step over those nodes)."""
        wanted = {node: n for node, n in counts.items() if n > 0}
        output = run(commands.probe_command(self.job_id, wanted, sys.executable), timeout,
                     f"picking ports on job {self.job_id}'s nodes {', '.join(wanted)}")
        found = commands.parse_probe(output)
        for node, n in wanted.items():
            if len(found.get(node, [])) < n:
                raise SlurmError(f"node {node} of job {self.job_id} did not give {n} free ports (it said: "
                                 f"{output.strip()[:200] or 'nothing'}). Nothing was started.")
        return found

    def step_id(self, name: str, timeout: float) -> str:
        """The id (``JOB.STEP``) of this job's step named ``name`` while it runs, else ""."""
        return commands.parse_step_id(quiet(["squeue", "-h", "-s", "-j", self.job_id, "-o", "%i %j"], timeout), name)


def hostnames(nodelist: str, timeout: float) -> list[str]:
    """``n[1-2],gpu03``: each node's name, expanded by Slurm (``scontrol show hostnames``)."""
    return run(["scontrol", "show", "hostnames", nodelist], timeout, f"the node list {nodelist!r}").split()


def cancel(job_or_step: str, timeout: float) -> None:
    """``scancel`` a job or a step of ours (a step's tasks get SIGKILL); nothing if it is gone."""
    if job_or_step:
        quiet(["scancel", "--quiet", job_or_step], timeout)
