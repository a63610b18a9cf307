"""The registry of private TensorFlow / Keras symbols (``distlib/compat/internals.py``) against the installed packages:
one fast test per symbol (TensorFlow, Keras 3 and tf_keras are imported in this test process), the entries of the
TensorFlow 2.15 environment there, the warning a missing symbol gives, and a fresh interpreter that imports the
registry and the fix without TensorFlow. The checks that read only nbworkers' sources are in
tests/unit/test_compat_internals.py."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from nbworkers.distlib.compat import internals

REPO = Path(__file__).resolve().parents[2]
TF215_PYTHON = REPO / ".venv-tf215" / "bin" / "python"  # `make estimator-env`: TensorFlow 2.15 + tf.estimator


def installed(entry: internals.Internal) -> bool:
    return importlib.util.find_spec(entry.module.split(".")[0]) is not None


@pytest.fixture(scope="module", autouse=True)
def packages_imported():
    """Import TensorFlow, Keras 3 and tf_keras once, before the per-test environment check (they set variables)."""
    import keras  # noqa: F401
    import tensorflow  # noqa: F401
    import tf_keras  # noqa: F401


@pytest.mark.parametrize("entry", internals.REGISTRY, ids=lambda e: e.name)
def test_symbol_is_present_in_the_installed_packages(entry):
    if not installed(entry):
        pytest.skip(f"{entry.module.split('.')[0]} is not installed here (checked in .venv-tf215 below)")
    assert internals.problem(entry) is None, (entry.name, internals.problem(entry))


@pytest.mark.skipif(not TF215_PYTHON.exists(), reason="no .venv-tf215 (make estimator-env)")
def test_symbols_of_the_tensorflow_215_environment_are_present_there():
    """The entries checked on TensorFlow 2.15 (tf.estimator, and everything else distlib patches there too)."""
    names = [e.name for e in internals.REGISTRY if "2.15" in e.checked]
    assert any(name.startswith("tensorflow_estimator") for name in names)
    code = ("from nbworkers.distlib.compat import internals\n"
            f"gone = [(e.name, internals.problem(e)) for e in internals.REGISTRY if e.name in {names!r}]\n"
            "print([g for g in gone if g[1] is not None])")
    out = subprocess.run([str(TF215_PYTHON), "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-2000:] + out.stderr[-2000:]


def test_a_missing_symbol_is_reported_once_with_its_issue_and_versions(capsys):
    gone = internals.Internal("keras.src.backend.tensorflow.trainer", "TensorFlowTrainer._no_such_method",
                              "keras3/mwms", "test", "keras 3.15.1", internals.K20585)
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
    code = ("import sys; import nbworkers.distlib.compat.internals, nbworkers.distlib.compat.keras3.mwms, nbworkers.distlib.worker.startup;"
            " from nbworkers.distlib.compat.keras3 import fit_guard; fit_guard.install_fit_guard();"
            " print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_log_texts_the_kernel_classifies_by_live_in_one_place():
    from nbworkers.magics.launch import ports
    from nbworkers.magics.run.core import failures
    from nbworkers.protocol import tf_messages

    assert failures.PEER_LOST_MARKERS is tf_messages.PEER_LOST_MARKERS
    assert ports.PORT_TAKEN_MARKERS is tf_messages.PORT_TAKEN_MARKERS
    peer_gone = "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed"
    assert failures.classify_exit(0, 1, peer_gone).kind == "PeerLost"
    import tensorflow.python.distribute.coordinator.coordinator_context as coordinator_context

    assert tf_messages.mentions(Path(coordinator_context.__file__).read_text(), tf_messages.KERAS3_FIT_UNDER_PSS)


def test_the_worker_side_and_the_host_import_neither_tensorflow_nor_the_kernel_side():
    code = ("import sys; import nbworkers.distlib.compat.internals, nbworkers.distlib.compat.keras3.mwms, nbworkers.distlib.worker.startup;"
            " import nbworkers.distlib.compat.eager_context as ec; assert not ec.started();"
            " import nbworkers.distlib.worker.zygote, nbworkers.distlib.worker.session, nbworkers.distlib.worker.roles;"
            " from nbworkers.distlib.compat.keras3 import fit_guard; fit_guard.install_fit_guard();"
            " import nbworkers.host.worker_host;"
            " print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras')"
            " or m.startswith('nbworkers.magics')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
