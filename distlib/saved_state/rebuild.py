"""Which session cell last bound each name of a worker's namespace, and the saved trackables put back as soon as
a cell binds their names again (``NBWORKERS_RESTORE_ON_REBUILD``, on by default).

``Bindings`` compares the namespace's objects before and after each cell: a name bound to another object (or a new
one) was built by that cell. The save reports those cell numbers, so the failed cell can say which cells to run
again. In the new processes after a save, ``Bindings.after`` hands the names a cell rebound to
``restore_rebuilt``, which reads the saved state into the ones still waiting for it (``namespace.
restore_session_state`` with those names): each at the end of the cell that rebuilt it, once.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Mapping, MutableMapping
from typing import Any

from nbworkers.distlib.saved_state import files
from nbworkers.distlib.saved_state import objects as saved_objects
from nbworkers.distlib.saved_state.plan import TRACKABLE_KINDS
from nbworkers.protocol import env_settings


class Bindings:
    """name -> the session cell that last bound it (``built_in``), from snapshots of the objects' ids."""

    def __init__(self) -> None:
        self.built_in: dict[str, int] = {}
        self._before: dict[str, int] = {}

    def before(self, namespace: Mapping[str, Any]) -> None:
        self._before = {name: id(value) for name, value in list(namespace.items()) if not name.startswith("_")}

    def after(self, namespace: Mapping[str, Any], cell: int) -> list[str]:
        """The names ``cell`` bound (new, or to another object than before it), now recorded as built in it."""
        rebound = [name for name, value in list(namespace.items())
                   if not name.startswith("_") and self._before.get(name) != id(value)]
        for name in rebound:
            self.built_in[name] = cell
        return rebound


def waiting_names(run_dir: str, generation: int) -> dict[str, set[str]]:
    """The trackables worker 0 saved before these processes started, still to be put back, each with the names
    its optimizers' slots need first (``objects.owners``); none when these processes did not follow a save, or
    worker 0's save is not readable here."""
    if not run_dir or generation < 1:
        return {}
    saved = files.latest_saved(run_dir, generation)
    if saved != generation - 1:
        return {}
    manifest = files.read_manifest(files.holder_dir(run_dir, saved)) or {}
    return {entry["name"]: saved_objects.owners(entry.get("builds") or {}) for entry in manifest.get("saved", [])
            if entry.get("kind") in TRACKABLE_KINDS}


class RestoreOnRebuild:
    """The saved trackables waiting for a cell to bind their names again (``restore_rebuilt``)."""

    def __init__(self, namespace: MutableMapping[str, Any], run_dir: str, generation: int,
                 enabled: bool | None = None):
        self.namespace = namespace
        on = env_settings.RESTORE_ON_REBUILD.get() if enabled is None else enabled
        self.needs = waiting_names(run_dir, generation) if on else {}
        self.waiting = set(self.needs)
        self.rebuilt: set[str] = set()  # waiting names a cell bound again, their optimizers' variables not yet there

    def restore_rebuilt(self, rebound: list[str]) -> dict[str, str]:
        """Put back the waiting names a cell bound again (``rebound``: this cell's), once the names their
        optimizers were built for are there too (a standalone optimizer built in a cell before its model's waits
        for that cell); what was restored. A name that cannot be put back is said on stderr (the cell shows it)
        and not tried again: ``%workers restore``."""
        self.rebuilt |= set(rebound) & self.waiting
        names = sorted(n for n in self.rebuilt if all(owner in self.namespace for owner in self.needs[n]))
        if not names:
            return {}
        from nbworkers.distlib.saved_state.namespace import StateNotRestored, restore_session_state

        self.waiting -= set(names)
        self.rebuilt -= set(names)
        try:
            return restore_session_state(names, self.namespace)
        except StateNotRestored as error:
            print(f"nbworkers: {error}\n(after fixing the cell, `%workers restore` puts it back)", file=sys.stderr,
                  flush=True)
        except Exception:
            print("nbworkers: the saved state could not be put back:", file=sys.stderr, flush=True)
            traceback.print_exc()
        return {}
