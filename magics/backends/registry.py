"""Backends by registration: the name ``%%worker --backend`` takes maps to a ``BackendKind`` here, never through an
``if name == ...`` in the code that uses it.

A backend is one module and one registration. The module declares a ``BackendKind``: its name, the magic's
arguments it adds (``Flag``; ``%%worker --help`` lists them under its name), the dataclass of its options those
arguments fill, its checks of them, whether a run of it can ``--detach``, be elastic (``--min-workers``) or have its
``--python`` and ``--cwd`` checked on this machine, what it prewarms at ``%load_ext`` and lets go at ``%workers stop
--all``, and how it makes the run's ``Backend`` (``magics/shapes.py``:
its relay, placement, launch, isolation fact; its handles' node labels). The registration is an entry point in the
group ``nbworkers.backends`` (the built-in ``local`` and ``ray`` are registered in nbworkers' pyproject.toml like a
third party's)::

    [project.entry-points."nbworkers.backends"]
    slurm = "nbworkers_slurm:SLURM"

or, in the kernel, ``register(kind)`` (a test's fake backend). Names are case-insensitive (``--backend Ray``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from typing import Any, Generic, TypeVar

from nbworkers.magics import plugins
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.plugins import Flag  # (a backend's or a framework's argument to %%worker)
from nbworkers.magics.shapes import Backend

GROUP = "nbworkers.backends"  # the entry-point group
DEFAULT = "local"  # --backend's default
log = logging.getLogger("nbworkers")

Options = TypeVar("Options")


@dataclass(frozen=True)
class BackendKind(Generic[Options]):
    """A backend's registration: see the module's docstring."""

    name: str  # what --backend takes (lower case)
    title: str  # how messages name it: "the Ray backend"
    summary: str  # what --backend's help says of it: "a Ray cluster (pip install nbworkers[ray])"
    options: type[Options]  # a dataclass with a default for every field, filled from ``flags``
    create: Callable[[LaunchSpec, Options], Backend]  # the run's backend (a restart plans and launches it again)
    check: Callable[[Options], None] = lambda options: None  # before anything starts: a LaunchError says what to do
    flags: Sequence[Flag] = ()
    can_detach: bool = False  # %%worker --detach: a supervisor process of its own runs it (pickles the spec)
    elastic: bool = False  # --min-workers: its capacity() changes while a run goes on (nodes come and go)
    runs_here: bool = True  # its workers run on this machine: --python and --cwd are checked here
    prewarm: Callable[[], None] = lambda: None  # at %load_ext, in the background: what its first run needs ready
    release_idle: Callable[[], int] = lambda: 0  # %workers stop --all, the kernel's exit: what it kept, how many

    def options_of(self, spec: LaunchSpec) -> Options:
        """The options the spec carries (its defaults for a spec made without them)."""
        return spec.options if isinstance(spec.options, self.options) else self.options()

    def backend_for(self, spec: LaunchSpec) -> Backend:
        return self.create(spec, self.options_of(spec))


_kinds: dict[str, BackendKind[Any]] | None = None
_listeners: list[Callable[[BackendKind[Any]], None]] = []


def kinds() -> dict[str, BackendKind[Any]]:
    """Every registered backend by name, the default first (the entry points are read once per process)."""
    global _kinds
    if _kinds is None:
        _kinds = plugins.registered(GROUP, BackendKind, "backend", DEFAULT)
    return _kinds


def _entry_points() -> Iterator[EntryPoint]:
    return plugins.entry_points(GROUP)


def register(kind: BackendKind[Any]) -> None:
    """Add (or replace) a backend in this process: ``%%worker --backend NAME`` takes it from now on."""
    kinds()[kind.name.lower()] = kind
    for listener in list(_listeners):
        listener(kind)


def unregister(name: str) -> None:
    kinds().pop(name.lower(), None)


def on_register(listener: Callable[[BackendKind[Any]], None]) -> None:
    """Call ``listener`` with every backend registered from now on (a magic's parser adds its flags)."""
    _listeners.append(listener)


def get(name: str) -> BackendKind[Any]:
    """The backend registered as ``name``; ``LookupError`` naming the ones there are."""
    try:
        return kinds()[(name or DEFAULT).lower()]
    except KeyError:
        raise LookupError(f"--backend {name}: no such backend (registered: {', '.join(kinds()) or 'none'})") from None


def backend_for(spec: LaunchSpec) -> Backend:
    """The backend a launch asked for (``--backend``), made by its registration."""
    return get(spec.backend).backend_for(spec)


def prewarm() -> None:
    """At ``%load_ext nbworkers``: each backend prepares what its first run needs (in the background)."""
    for kind in kinds().values():
        try:
            kind.prewarm()
        except Exception as error:  # the first run says what is wrong
            log.warning("nbworkers: backend %r could not prewarm: %s", kind.name, error)


def release_idle() -> int:
    """What the backends keep for the next runs between runs (Ray's idle worker groups) let go: how many."""
    return sum(kind.release_idle() for kind in kinds().values())


def names(where: Callable[[BackendKind[Any]], bool] = lambda kind: True) -> list[str]:
    return [name for name, kind in kinds().items() if where(kind)]


def titles(where: Callable[[BackendKind[Any]], bool]) -> str:
    """``Ray``, ``local and Ray``: the backends ``where`` holds for, as messages name them."""
    found = [kind.title for kind in kinds().values() if where(kind)]
    return " and ".join([", ".join(found[:-1]), found[-1]] if len(found) > 1 else found) or "no"
