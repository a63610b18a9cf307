"""PyTorch's ``torch.distributed`` across processes (``%%worker --framework torch``): the environment ``torchrun``
gives, composed here.

Each worker gets what ``torchrun`` sets for a process of its group: ``MASTER_ADDR`` and ``MASTER_PORT`` (worker 0's
host, and the port the backend chose for worker 0 as for TensorFlow: rank 0's ``TCPStore`` listens there), ``RANK``
and ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` (among the workers on the same host), ``GROUP_RANK`` (its
host's index, hosts in the order of their first worker), ``ROLE_RANK`` and ``ROLE_WORLD_SIZE`` (one role: ``RANK``
and ``WORLD_SIZE``). The cell calls ``torch.distributed.init_process_group("gloo")`` itself, as a script under
``torchrun`` does (``init_method`` ``env://``, the default, reads these). Every worker of the run shares
``OMP_NUM_THREADS=1`` (``torchrun``'s default with several processes per machine; read when the OpenMP runtime
loads, so part of the zygote's key), unless the kernel or the user's ``--env`` sets it. What the worker side does:
``distlib/frameworks/torch.py``. Registered as ``torch`` in the entry-point group ``nbworkers.frameworks``.

This module never imports PyTorch: it runs in the kernel.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbworkers.magics.plugins import Flag
from nbworkers.magics.shapes import PlannedTask

ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"
ENV_THREADS = "OMP_NUM_THREADS"
VARIABLES = (ENV_MASTER_ADDR, ENV_MASTER_PORT, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "ROLE_RANK", "ROLE_WORLD_SIZE")


def torchrun_variables(hosts: Sequence[str], ports: Sequence[int], index: int) -> dict[str, str]:
    """What ``torchrun`` gives worker ``index`` of a group whose workers are at ``hosts`` (worker 0's store at
    ``hosts[0]:ports[0]``)."""
    host = hosts[index]
    same_host = [i for i, other in enumerate(hosts) if other == host]
    machines = list(dict.fromkeys(hosts))  # each host once, in the order of its first worker
    world = str(len(hosts))
    return {ENV_MASTER_ADDR: hosts[0], ENV_MASTER_PORT: str(ports[0]), "RANK": str(index), "WORLD_SIZE": world,
            "LOCAL_RANK": str(same_host.index(index)), "LOCAL_WORLD_SIZE": str(len(same_host)),
            "GROUP_RANK": str(machines.index(host)), "ROLE_RANK": str(index), "ROLE_WORLD_SIZE": world}


@dataclass(frozen=True)
class Torch:
    """The ``Framework`` (``frameworks/__init__.py``) of PyTorch's ``torch.distributed`` (gloo on CPU)."""

    name: str = "torch"
    summary: str = "PyTorch's torch.distributed (torchrun's MASTER_ADDR, RANK, WORLD_SIZE...; the cell calls " \
                   "init_process_group; pip install nbworkers[torch])"
    flags: Sequence[Flag] = ()
    roles: frozenset[str] = frozenset({"worker"})
    variables: frozenset[str] = frozenset(VARIABLES)
    shown: str = ENV_MASTER_PORT
    requires: Sequence[str] = ("torch",)
    # gloo's line when a worker's process group is up, and c10d's warning when its store's client cannot name its own
    # address (a local run's private network namespace has no resolver): once per worker in every healthy run
    chatter: Sequence[str] = (r"\[Gloo\] Rank \d+ is connected to \d+ peer ranks\. ",
                              r"\[W\d{4} [\d:.]+ socket\.cpp:\d+\] \[c10d\] The hostname of the client socket "
                              r"cannot be retrieved\. ")

    def environment(self, tasks: Sequence[PlannedTask], hosts: Sequence[str], ports: Sequence[int],
                    index: int) -> dict[str, str]:
        return torchrun_variables(hosts[:len(tasks)], ports, index)

    def shared(self, options: Mapping[str, Any]) -> dict[str, str]:
        return {} if os.environ.get(ENV_THREADS) else {ENV_THREADS: "1"}


TORCH = Torch()
