"""Frameworks behind a seam: what a worker needs to join its group, per framework (TensorFlow today).

A framework is one module and one registration (``registry``): its name, the magic's arguments it adds (``Flag``s
filling its options: ``--cpu-devices`` for JAX), the roles a cell of it may ask for, the environment contract (the
variables each worker gets, given the tasks, their hosts and ports and the worker's index: ``{"TF_CONFIG": ...}``
for TensorFlow) and the names of those variables (per worker: never inherited from the kernel, never part of a
zygote's environment, always forwarded to a Ray node), and the variables every worker of a run shares that are
read at import (``shared``: ``KERAS_BACKEND=jax``; they select the zygote the workers fork from, whose imports
``distlib/frameworks`` says). Nothing else composes or names them. The worker side of a framework (what its
zygote imports ahead, its bootstrap before the cell's code) is ``distlib/frameworks/<name>.py``, picked by the
``NBWORKERS_FRAMEWORK`` the kernel sets (``registry.shared``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from nbworkers.magics.plugins import Flag
from nbworkers.magics.shapes import PlannedTask


@runtime_checkable
class Framework(Protocol):
    """A framework's contract with the workers of a group (the TensorFlow one: ``frameworks/tensorflow.py``)."""

    @property
    def name(self) -> str: ...  # what a spec's ``framework`` names (lower case): "tf"

    @property
    def summary(self) -> str: ...  # what --framework's help says of it: "Keras 3 on JAX (pip install nbworkers[jax])"

    @property
    def flags(self) -> Sequence[Flag]: ...  # the magic's arguments it adds (listed under "--framework NAME")

    @property
    def roles(self) -> frozenset[str]: ...  # the roles a cell may ask for ("worker"; TensorFlow's chief, ps...)

    @property
    def variables(self) -> frozenset[str]: ...  # the names ``environment`` sets: per worker only

    @property
    def requires(self) -> Sequence[str]: ...  # the modules its workers import ("jax", "keras"): checked before a launch

    @property
    def chatter(self) -> Sequence[str]: ...  # regexes of its runtime's start-up lines the views leave out (level 1+)

    @property
    def shown(self) -> str: ...  # the variable a worker's launch line in its log shows

    def environment(self, tasks: Sequence[PlannedTask], hosts: Sequence[str], ports: Sequence[int],
                    index: int) -> dict[str, str]:
        """The variables worker ``index`` of ``tasks`` (in launch order; each at ``hosts[i]:ports[i]``) gets."""
        ...

    def shared(self, options: Mapping[str, Any]) -> dict[str, str]:
        """The variables every worker of a run gets, read at import (part of its zygote's key), given the options
        its flags filled (each flag's ``dest``: its value). The user's ``--env`` wins over them."""
        ...
