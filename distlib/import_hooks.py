"""Run a callback right after a module is first imported (a ``sys.meta_path`` finder; costs nothing until then).

``when_imported("tensorflow", callback)`` calls ``callback(module)`` once the module's code has run; at once
when it is already imported. A failing callback prints a warning and never breaks the user's import.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
import traceback
from types import ModuleType
from typing import Callable

Callback = Callable[[ModuleType], None]

_callbacks: dict[str, list[Callback]] = {}
_lock = threading.RLock()


def _run(name: str, module: ModuleType, callbacks: list[Callback]) -> None:
    for callback in callbacks:
        try:
            callback(module)
        except Exception:
            sys.stderr.write(f"nbworkers: post-import hook for {name} failed (ignored):\n{traceback.format_exc()}")


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self._resolving: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        with _lock:
            if fullname not in _callbacks or fullname in self._resolving:
                return None
            self._resolving.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)  # the other finders (we skip ourselves above)
        finally:
            with _lock:
                self._resolving.discard(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None or isinstance(loader, type) or not hasattr(loader, "exec_module"):
            return None  # class-level loaders (builtins) are shared: leave them alone
        original_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            with _lock:
                callbacks = _callbacks.pop(fullname, [])
            _run(fullname, module, callbacks)

        loader.exec_module = exec_module  # this spec's own loader instance
        return spec


_finder = _PostImportFinder()


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` after ``name`` is imported (now, if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        _run(name, module, [callback])
        return
    with _lock:
        _callbacks.setdefault(name, []).append(callback)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
