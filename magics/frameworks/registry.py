"""Frameworks by registration: the name a spec's ``framework`` carries maps to a ``Framework`` here, never through
an ``if name == ...`` in the code that uses it.

The registration is an entry point in the group ``nbworkers.frameworks`` (the built-in ``tf`` is registered in
nbworkers' pyproject.toml like a third party's)::

    [project.entry-points."nbworkers.frameworks"]
    jax = "nbworkers_jax:JAX"

or, in the kernel, ``register(framework)`` (a test's fake framework). Names are case-insensitive.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from importlib.metadata import EntryPoint
from typing import Any

from nbworkers.magics import plugins
from nbworkers.magics.frameworks import Framework
from nbworkers.protocol import env_settings

GROUP = "nbworkers.frameworks"  # the entry-point group
DEFAULT = "tf"  # a spec's default

_frameworks: dict[str, Framework] | None = None
_chatter: tuple[tuple[str, ...], re.Pattern[str] | None] | None = None  # (the patterns, compiled)


def frameworks() -> dict[str, Framework]:
    """Every registered framework by name, the default first (the entry points are read once per process)."""
    global _frameworks
    if _frameworks is None:
        _frameworks = plugins.registered(GROUP, Framework, "framework", DEFAULT)
    return _frameworks


def _entry_points() -> Iterator[EntryPoint]:
    return plugins.entry_points(GROUP)


def register(framework: Framework) -> None:
    """Add (or replace) a framework in this process."""
    frameworks()[framework.name.lower()] = framework


def unregister(name: str) -> None:
    frameworks().pop(name.lower(), None)


def get(name: str) -> Framework:
    """The framework registered as ``name``; ``LookupError`` naming the ones there are."""
    try:
        return frameworks()[(name or DEFAULT).lower()]
    except KeyError:
        known = ", ".join(frameworks()) or "none"
        raise LookupError(f"framework {name}: no such framework (registered: {known})") from None


def variables() -> frozenset[str]:
    """Every registered framework's per-worker variables: what no zygote and no worker inherits from the kernel."""
    return frozenset().union(*(framework.variables for framework in frameworks().values()))


def blank(name: str = DEFAULT) -> dict[str, str]:
    """A framework's variables, each empty: the environment of a run not planned yet (a zygote's prewarm)."""
    return dict.fromkeys(sorted(get(name).variables), "")


def chatter() -> re.Pattern[str] | None:
    """Every registered framework's start-up lines as one pattern (None: none declares any); made once for the
    frameworks registered now (the views ask for each line)."""
    global _chatter
    patterns = tuple(pattern for framework in frameworks().values() for pattern in framework.chatter)
    if _chatter is None or _chatter[0] != patterns:
        _chatter = (patterns, re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None)
    return _chatter[1]


def shared(name: str = DEFAULT, options: Mapping[str, Any] | None = None) -> dict[str, str]:
    """What every worker of a run of framework ``name`` shares, read at import (its zygote's key): the framework's
    name for the worker side (``NBWORKERS_FRAMEWORK``: ``distlib/frameworks``) and its own ``shared`` variables."""
    framework = get(name)
    return {env_settings.FRAMEWORK.name: framework.name, **framework.shared(options or {})}
