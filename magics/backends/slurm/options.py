"""``--backend slurm``'s options: what its flags (``kind.py``) fill, what ``SlurmBackend.from_spec`` reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SlurmOptions:
    spread: bool = False  # at most one worker per node of the allocation
    tasks_per_node: int | None = None  # at most this many workers per node (None: the workers in turn on each node)
    submit: bool = False  # outside an allocation: ask Slurm for one (salloc), the options below
    partition: str = ""  # --submit: the partition (-p)
    time: str = ""  # --submit: the time limit (-t), as Slurm takes it: 30, 1:00:00, 1-0
    account: str = ""  # --submit: the account (-A)
    slurm_arg: tuple[str, ...] | list[str] | None = None  # --submit: more salloc arguments, each as given
