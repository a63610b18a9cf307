"""Run a callback right after a module is first imported, through ``wrapt``'s post-import hooks.

``when_imported("tensorflow", callback)`` calls ``callback(module)`` once the module's code has run; at once
when it is already imported. A failing callback prints a warning and never breaks the user's import.

One mechanism for every hook in the workers: a second, hand-made ``sys.meta_path`` finder beside wrapt's
wrapped the same loaders twice and recursed (wrapt 2.x), so all hooks go through wrapt.

``wrap_once(owner, "name", wrapper)`` wraps a TensorFlow/Keras function or method with a wrapt wrapper
(``wrapper(wrapped, instance, args, kwargs)``), at most once per wrapper: no hand-made guard flags.
"""

from __future__ import annotations

import sys
import traceback
from types import ModuleType
from typing import Callable

from nbworkers.distlib.compat import internals

Callback = Callable[[ModuleType], None]


def safely(name: str, callback: Callback) -> Callback:
    """``callback`` wrapped so that an exception is reported on stderr and never breaks the import."""

    def run(module: ModuleType) -> None:
        try:
            callback(module)
        except Exception:
            sys.stderr.write(f"nbworkers: post-import hook for {name} failed (ignored):\n{traceback.format_exc()}")

    return run


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` after ``name`` is imported (now, if it already is)."""
    import wrapt

    wrapt.register_post_import_hook(safely(name, callback), name)


def wrap_once(owner: object, name: str, wrapper: Callable) -> bool:
    """Wrap ``owner.<name>`` (a class or module attribute) with the wrapt ``wrapper`` unless ``wrapper`` already
    wraps it; True when it wrapped now."""
    import inspect

    import wrapt

    internals.available("import_hooks", "a patch installed twice may wrap its method twice")
    current = inspect.getattr_static(owner, name)
    while isinstance(current, wrapt.FunctionWrapper):
        if getattr(current, "_self_wrapper", None) is wrapper:
            return False
        current = current.__wrapped__
    wrapt.wrap_function_wrapper(owner, name, wrapper)
    return True
