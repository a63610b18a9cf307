"""What a worker does for its framework: the worker side of ``magics/frameworks`` (the kernel side composes each
worker's environment; this side acts on it).

A framework's worker module (``tensorflow``, ``jax``, ``torch``; a third party's registered in the entry-point group
``nbworkers.worker_frameworks``) holds:

- ``preload()``: the modules a zygote of that framework imports ahead of its runs (none of them may start the
  framework's runtime: the zygote forks afterwards);
- ``guard_broken()``: why its fork guard cannot be trusted (the private symbols it reads are gone), or "";
- ``fork_refusal()``: why the zygote must not fork now (its runtime started), or None;
- ``before_user_code()``: the bootstrap inside the worker before the cell's code (TensorFlow: import hooks;
  JAX: ``keras.distribution.initialize`` and a ``DataParallel`` distribution over every process's devices);
- ``leaving(exit_code)``: what it does as the worker leaves, before the ``atexit`` functions (JAX: a stopped or
  failed worker skips JAX's distributed shutdown, whose barrier waits for peers that may be blocked on it).

The kernel names the run's framework in ``NBWORKERS_FRAMEWORK`` (``env_settings.FRAMEWORK``); a zygote has it too
(it is part of a zygote's key), so a JAX run's workers fork from a zygote that imported JAX, not TensorFlow.
Importing this package imports no framework.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points
from types import ModuleType
from typing import Protocol, cast

from nbworkers.protocol import env_settings

GROUP = "nbworkers.worker_frameworks"
BUILT_IN = {"tf": "nbworkers.distlib.frameworks.tensorflow", "jax": "nbworkers.distlib.frameworks.jax",
            "torch": "nbworkers.distlib.frameworks.torch"}


class WorkerFramework(Protocol):
    """A framework's worker module (see the package's docstring)."""

    NAME: str
    IMPORTED: str  # what its zygote imported, as a forked worker's first line says: "TensorFlow"

    def preload(self) -> list[str]: ...

    def guard_broken(self) -> str: ...

    def fork_refusal(self) -> str | None: ...

    def before_user_code(self) -> None: ...

    def leaving(self, exit_code: int) -> None: ...


def module_name(name: str) -> str:
    """The worker module of the framework ``name`` (``tf`` when empty); ``LookupError`` when none is registered."""
    name = (name or "tf").lower()
    if name in BUILT_IN:
        return BUILT_IN[name]
    for point in entry_points(group=GROUP):
        if point.name.lower() == name:
            return point.value
    raise LookupError(f"framework {name!r}: no worker module is registered for it (entry-point group {GROUP})")


def require(extra: str, *names: str) -> list[ModuleType]:
    """The modules ``names``, imported; when one is missing, an ImportError that says what to install for the
    workers' interpreter (``nbworkers[extra]``, the extra of ``--framework extra``)."""
    try:
        return [importlib.import_module(name) for name in names]
    except ImportError as error:
        raise ImportError(f"--framework {extra}: {error.name} is not installed for the workers' interpreter "
                          f"({sys.executable}): pip install \"nbworkers[{extra}]\" there") from None


def current() -> WorkerFramework:
    """This process's framework: the one ``NBWORKERS_FRAMEWORK`` names (TensorFlow when unset)."""
    module: ModuleType = importlib.import_module(module_name(env_settings.FRAMEWORK.get()))
    return cast(WorkerFramework, module)
