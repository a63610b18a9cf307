"""No garbage collection while a framework's modules import in a worker that was spawned: its zygote's recipe
(``distlib/worker/zygote.py``: collections off during the imports, ``gc.freeze`` after) for a worker that starts
without one (the first run on a Ray or Slurm node, ``NBWORKERS_ZYGOTE=0``, a cell the zygote cannot serve).

TensorFlow's import builds some 600,000 objects and no garbage worth the collections that walk them: here,
``import tensorflow, tf_keras`` took 3.85-4.01 s of CPU with collections off against 4.64-4.91 s with them on
(three runs each, user time). ``install(names)`` puts a finder first on ``sys.meta_path`` that watches the imports
of ``names`` (the modules the framework's zygote preloads, ``WorkerFramework.preload``): when the first of them
starts, collections stop; when the last one ends, whether it succeeded or raised, what was built is frozen (the
permanent generation, never walked again; reference counting still frees it; what the cell made before its import is
frozen with it, as in a forked worker, where the zygote froze its imports) and collections resume. The cell
imports them where it does, after whatever it set before (``TF_CPP_MIN_LOG_LEVEL``, ``KERAS_BACKEND``): nothing is
imported ahead.

The finder steps aside for a module another finder provides differently: it asks the rest of ``sys.meta_path``
for the module's spec (wrapt's post-import hooks included: ``compat/import_hooks.py``), guarded against asking
itself again, and wraps the loader found; a spec without ``exec_module`` is returned as found.
"""

from __future__ import annotations

import gc
import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Iterable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


class _Quiet:
    """How many watched imports are running (nested or in other threads), and whether collections were on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.was_enabled = False

    def enter(self) -> None:
        with self.lock:
            if self.depth == 0:
                self.was_enabled = gc.isenabled()
                gc.disable()
            self.depth += 1

    def leave(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0 and self.was_enabled:
                gc.freeze()
                gc.enable()


class _QuietLoader(importlib.abc.Loader):
    """``loader`` with its ``exec_module`` run while collections are off; the module keeps ``loader`` itself."""

    def __init__(self, loader: Any, quiet: _Quiet) -> None:
        self.loader = loader
        self.quiet = quiet

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        self.quiet.enter()
        try:
            self.loader.exec_module(module)
        finally:
            self.quiet.leave()

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package...: the loader's own
        return getattr(self.loader, name)


class QuietImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of a watched module that the other finders found."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)
        self.quiet = _Quiet()
        self.asking = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname not in self.names or fullname in getattr(self.asking, "names", ()):
            return None
        asking = self.asking.__dict__.setdefault("names", set())
        asking.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        except (ImportError, ValueError):
            return None
        finally:
            asking.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _QuietLoader(spec.loader, self.quiet)
        return spec


def install(names: Iterable[str]) -> QuietImportFinder | None:
    """Watch the imports of ``names`` not imported yet (none: nothing installed); idempotent per process."""
    for finder in sys.meta_path:
        if isinstance(finder, QuietImportFinder):
            return finder
    waiting = [name for name in names if name not in sys.modules]
    if not waiting:
        return None
    finder = QuietImportFinder(waiting)
    sys.meta_path.insert(0, finder)
    return finder
