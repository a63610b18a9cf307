"""Hooks the worker bootstrap calls around the user's cell. Neither imports TensorFlow.

``before_user_code()`` registers post-import hooks, so a cell that never imports TensorFlow pays nothing:
- when ``tensorflow`` is imported: arm early collectives (``collective_startup``: the tutorials' "dataset
  before strategy" order works) and wrap MultiWorkerMirroredStrategy's setup (``strategy_setup``: "waiting" /
  "running" status, the cross-worker GPU-count check);
- when Keras 3's TensorFlow trainer is imported: fix its ``model.fit`` / ``evaluate`` / ``predict`` (and
  ``BackupAndRestore``) under MultiWorkerMirroredStrategy (``compat/keras3/mwms``), and where that fix cannot apply,
  turn the upstream failure into a message naming the two ways that work (``compat/keras3/fit_guard``).

``after_user_code()`` sends the last throttled metrics and removes non-chief private directories (the
bootstrap leaves with ``os._exit``, which skips ``atexit``).
"""

from __future__ import annotations

from types import ModuleType

from nbworkers.distlib import dirs, reporting
from nbworkers.distlib.compat.import_hooks import when_imported
from nbworkers.distlib.compat.keras3 import fit_guard
from nbworkers.distlib.worker.mwms import collective_startup, strategy_setup


def _on_tensorflow_imported(module: ModuleType) -> None:
    strategy_setup.install()
    collective_startup.arm(module)


_hooks_installed = False


def before_user_code() -> None:
    """Install the import hooks (cheap: no TensorFlow import; idempotent)."""
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True

    when_imported("tensorflow", _on_tensorflow_imported)
    fit_guard.install_fit_guard()


def after_user_code() -> None:
    """Flush the last metrics and clean up private write directories."""
    try:
        reporting.flush_reports()
    finally:
        dirs._remove_all_pending()
