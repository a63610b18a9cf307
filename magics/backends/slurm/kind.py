"""The Slurm backend's registration (pyproject.toml, entry point group ``nbworkers.backends``): its flags, its
options, its checks before a launch. Imports none of the backend's code (``backend.py``): only a
``--backend slurm`` launch loads it.
"""

from __future__ import annotations

import os
import shutil

from nbworkers.magics.backends.registry import BackendKind, Flag
from nbworkers.magics.backends.slurm.options import SlurmOptions
from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.shapes import Backend

SUBMIT_ONLY = ("partition", "time", "account", "slurm_arg")
FLAGS = (
    Flag("--spread", {"action": "store_true", "help": "ray, slurm: at most one worker per node"}),
    Flag("--tasks-per-node", {"type": int, "default": None, "metavar": "T",
                              "help": "slurm: at most T workers per node of the allocation, filled in turn"}),
    Flag("--submit", {"action": "store_true",
                      "help": "slurm: outside an allocation, ask Slurm for one (salloc) and wait in the queue"}),
    Flag("--partition", {"default": "", "metavar": "P", "help": "slurm --submit: the partition (salloc -p)"}),
    Flag("--time", {"default": "", "metavar": "LIMIT", "help": "slurm --submit: the time limit (salloc -t)"}),
    Flag("--account", {"default": "", "metavar": "A", "help": "slurm --submit: the account (salloc -A)"}),
    Flag("--slurm-arg", {"action": "append", "default": None, "metavar": "ARG",
                         "help": "slurm --submit: one more salloc argument (--slurm-arg=--qos=debug; again for more)"}),
)


def check(options: SlurmOptions) -> None:
    """Slurm's commands must be here, and an allocation (or --submit); nothing starts otherwise."""
    if options.spread and options.tasks_per_node is not None:
        raise LaunchError("--spread and --tasks-per-node: give one of them (--spread is --tasks-per-node 1).")
    if options.tasks_per_node is not None and options.tasks_per_node < 1:
        raise LaunchError(f"--tasks-per-node {options.tasks_per_node}: give 1 or more.")
    given = [name for name in SUBMIT_ONLY if getattr(options, name)]
    if given and not options.submit:
        raise LaunchError(f"{', '.join('--' + n.replace('_', '-') for n in given)}: only with --submit (a new "
                          "allocation). Inside one, the workers use its nodes: leave them out, or add --submit.")
    if shutil.which("srun") is None:
        raise LaunchError("--backend slurm: srun is not on the kernel's PATH. Run the kernel on a machine of the "
                          "Slurm cluster (inside an allocation: salloc, sbatch, batchspawner, Open OnDemand).")
    if not options.submit and not os.environ.get("SLURM_JOB_ID"):
        raise LaunchError("--backend slurm: this kernel is not inside a Slurm allocation (no SLURM_JOB_ID). Start "
                          "the kernel inside one (salloc, sbatch, batchspawner, Open OnDemand), or add --submit to "
                          "ask Slurm for one (with --partition, --time, --account).")


def create(spec: LaunchSpec, options: SlurmOptions) -> Backend:
    from nbworkers.magics.backends.slurm.backend import SlurmBackend  # lazily: only --backend slurm loads its code

    return SlurmBackend.from_spec(spec, options)


SLURM: BackendKind[SlurmOptions] = BackendKind(
    name="slurm", title="Slurm", summary="job steps of a Slurm allocation", options=SlurmOptions, create=create,
    check=check, flags=FLAGS, can_detach=True, elastic=False, runs_here=True)
