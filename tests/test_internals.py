"""The registry of private TensorFlow / Keras symbols (``distlib/internals.py``) against the installed packages.

One fast test per symbol (TensorFlow, Keras 3 and tf_keras are imported in this test process), plus checks
that the registry stays honest: every entry is used by the module it names, every private module distlib
imports is in the registry, and a missing symbol gives one clear warning.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from nbworkers.distlib import internals

DISTLIB = Path(__file__).resolve().parents[1] / "distlib"
PRIVATE_IMPORT = re.compile(r"(?:from|import)\s+((?:tensorflow\.(?:python|core|compiler)|keras\.src|tf_keras\.src)[\w.]*)")


@pytest.fixture(scope="module", autouse=True)
def packages_imported():
    """Import TensorFlow, Keras 3 and tf_keras once, before the per-test environment check (they set variables)."""
    import keras  # noqa: F401
    import tensorflow  # noqa: F401
    import tf_keras  # noqa: F401


@pytest.mark.parametrize("entry", internals.REGISTRY, ids=lambda e: e.name)
def test_symbol_is_present_in_the_installed_packages(entry):
    assert internals.problem(entry) is None, (entry.name, internals.problem(entry))


@pytest.mark.parametrize("entry", internals.REGISTRY, ids=lambda e: e.name)
def test_entry_is_documented_and_used_by_its_module(entry):
    assert entry.why and entry.checked and entry.kind in ("attribute", "instance")
    source = (DISTLIB / f"{entry.group.split('.')[0]}.py").read_text()
    assert entry.attribute.split(".")[-1] in source, f"{entry.group}.py does not use {entry.attribute}: stale entry?"


def test_every_private_module_distlib_imports_is_registered():
    registered = {e.module for e in internals.REGISTRY}
    for path in sorted(DISTLIB.glob("*.py")):
        for module in PRIVATE_IMPORT.findall(path.read_text()):
            parents = {module.rsplit(".", n)[0] for n in range(module.count(".") + 1)}
            assert registered & (parents | {m for m in registered if m.startswith(module + ".")}), (
                f"{path.name} imports the private module {module}: register what it touches in distlib/internals.py")


def test_a_missing_symbol_is_reported_once_with_its_issue_and_versions(capsys):
    gone = internals.Internal("keras.src.backend.tensorflow.trainer", "TensorFlowTrainer._no_such_method",
                              "keras3_mwms", "test", "keras 3.15.1", internals.K20585)
    reason = internals.problem(gone)
    assert "_no_such_method" in reason
    assert internals.warn_once([(gone, reason)], "the fix stays off")
    assert not internals.warn_once([(gone, reason)], "the fix stays off")  # once per process
    err = capsys.readouterr().err
    assert err.count("nbworkers: the installed") == 1 and "_no_such_method" in err and "keras-team/keras#20585" in err and "keras 3.15.1" in err
    instance = internals.Internal("keras.src.callbacks.backup_and_restore", "BackupAndRestore._nowhere", "x", "t", "v",
                                  kind="instance")
    assert "_nowhere" in internals.problem(instance)
    assert "cannot import" in internals.problem(internals.Internal("keras.src.no_such_module", "X", "x", "t", "v"))


def test_importing_the_registry_and_the_fix_does_not_import_tensorflow():
    code = ("import sys; import nbworkers.distlib.internals, nbworkers.distlib.keras3_mwms, nbworkers.distlib.startup;"
            " from nbworkers.distlib import keras_compat; keras_compat.install_fit_guard();"
            " print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
