"""nbworkers' installed version, from its distribution's metadata: pyproject.toml's ``version``, the one place it
is written. Every side reads it here: ``nbworkers.__version__``, `%workers --version` and its listing, a Ray node's
report of itself. It imports nothing of nbworkers (any layer may use it)."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "nbworkers"
UNKNOWN_VERSION = "0+unknown"  # imported without the distribution's metadata (not installed with pip)


@cache
def installed_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return UNKNOWN_VERSION
