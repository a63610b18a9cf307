"""Frameworks behind a seam: what a worker needs to join its group, per framework (TensorFlow today).

A framework is one module and one registration (``registry``): its name, the environment contract (the variables
each worker gets, given the tasks, their hosts and ports and the worker's index: ``{"TF_CONFIG": ...}`` for
TensorFlow) and the names of those variables (per worker: never inherited from the kernel, never part of a
zygote's environment, always forwarded to a Ray node). Nothing else composes or names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from nbworkers.magics.shapes import PlannedTask


@runtime_checkable
class Framework(Protocol):
    """A framework's contract with the workers of a group (the TensorFlow one: ``frameworks/tensorflow.py``)."""

    @property
    def name(self) -> str: ...  # what a spec's ``framework`` names (lower case): "tf"

    @property
    def variables(self) -> frozenset[str]: ...  # the names ``environment`` sets: per worker only

    @property
    def shown(self) -> str: ...  # the variable a worker's launch line in its log shows

    def environment(self, tasks: Sequence[PlannedTask], hosts: Sequence[str], ports: Sequence[int],
                    index: int) -> dict[str, str]:
        """The variables worker ``index`` of ``tasks`` (in launch order; each at ``hosts[i]:ports[i]``) gets."""
        ...
