"""What installed distributions register in one of nbworkers' entry-point groups (``nbworkers.backends``,
``nbworkers.frameworks``; nbworkers registers its own there too, in pyproject.toml): each registry reads its group
once per process through ``registered``. A plugin that cannot be loaded, or is not what its group holds, is logged and
left out: it must not break ``%%worker``."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, distributions
from typing import Any

log = logging.getLogger("nbworkers")


def registered(group: str, kind: Any, what: str, default: str) -> dict[str, Any]:
    """The objects of ``group`` that are ``kind`` (a class, or a runtime-checkable protocol), by their lower-case
    ``name``, ``default`` first, then by name; the first registration of a name wins."""
    found: dict[str, Any] = {}
    for point in entry_points(group):
        if point.name.lower() in found:
            continue
        try:
            plugin = point.load()
        except Exception as error:  # a broken plugin must not break %%worker
            log.warning("nbworkers: %s %r (%s) could not be loaded: %s", what, point.name, point.value, error)
            continue
        if isinstance(plugin, kind):
            found[plugin.name.lower()] = plugin
        else:
            log.warning("nbworkers: %s %r (%s) is not a %s", what, point.name, point.value, kind.__name__)
    return dict(sorted(found.items(), key=lambda item: (item[0] != default, item[0])))


def entry_points(group: str) -> Iterator[EntryPoint]:
    """The group's entry points of every installed distribution (all of them: a stale ``nbworkers.egg-info`` in the
    working directory, found before the installed metadata, must not hide the installed registrations)."""
    for dist in distributions():
        for point in dist.entry_points:
            if point.group == group:
                yield point


@dataclass(frozen=True)
class Flag:
    """One argument a backend or a framework adds to ``%%worker``: ``option`` (``--address``) and ``add_argument``'s
    keywords. It fills the options field named as argparse names its destination (``--cpus-per-worker``:
    ``cpus_per_worker``; every plugin's flags share the magic's namespace: name them after the plugin when they may
    clash). ``elsewhere``: the error when it is given with another backend or framework ("": "only for the <title>
    backend", "only with --framework <name>")."""

    option: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    elsewhere: str = ""

    @property
    def dest(self) -> str:
        return str(self.kwargs.get("dest") or self.option.lstrip("-").replace("-", "_"))

    @property
    def default(self) -> Any:
        return self.kwargs.get("default", False if self.kwargs.get("action") == "store_true" else None)
