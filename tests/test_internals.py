"""The registry of private TensorFlow / Keras symbols (``distlib/compat/internals.py``) against the installed packages.

One fast test per symbol (TensorFlow, Keras 3 and tf_keras are imported in this test process), plus checks
that the registry stays honest: every entry is used by the module of ``distlib/compat/`` it names, every private
module distlib imports is in the registry, no file of distlib outside ``distlib/compat/`` touches a private upstream
symbol, and a missing symbol gives one clear warning. (The fence on imports, over every package folder, is a fast
test: tests/unit/test_layers.py.)
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nbworkers.distlib.compat import internals

REPO = Path(__file__).resolve().parents[1]
DISTLIB = REPO / "distlib"
COMPAT = DISTLIB / "compat"


def _module_path(group: str) -> Path:
    """The module of a registry group: ``distlib/compat/<group>.py`` (``<module>.<part>``: that module's part)."""
    return COMPAT / f"{group.split('.')[0]}.py"


TF215_PYTHON = REPO / ".venv-tf215" / "bin" / "python"  # `make estimator-env`: TensorFlow 2.15 + tf.estimator
PRIVATE_MODULE = r"(?:tensorflow\.(?:python|core|compiler)|keras\.src|tf_keras\.src|tensorflow_estimator\.python)[\w.]*"
PRIVATE_IMPORT = re.compile(rf"(?:from|import)\s+({PRIVATE_MODULE})|[\"']({PRIVATE_MODULE})[\"']")
# Private names distlib uses that are not TensorFlow's/Keras's: the standard library's, and the state nbworkers'
# own subclasses of upstream classes keep (estimator.ReportHook, keras_fit's save-on-SIGTERM callback).
NOT_UPSTREAM = {"_exit", "_every", "_loss", "_guard", "_batch"}
# Base classes that keep a class nbworkers' own (its attributes are not upstream's): the mixin of tf_keras's
# callback protocol declares upstream names itself, in compat/, where they are registered.
OWN_BASES = ("object", "Exception", "RuntimeError", "ValueError", "TfKerasProtocol")


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


@pytest.mark.parametrize("entry", internals.REGISTRY, ids=lambda e: e.name)
def test_entry_is_documented_and_used_by_its_module(entry):
    assert entry.why and entry.checked and entry.kind in ("attribute", "instance")
    source = _module_path(entry.group.split('.')[0]).read_text()
    assert entry.attribute.split(".")[-1] in source, f"{entry.group}.py does not use {entry.attribute}: stale entry?"


def test_every_private_module_distlib_imports_is_registered():
    registered = {e.module for e in internals.REGISTRY}
    for path in sorted(DISTLIB.rglob("*.py")):
        if path.name == "internals.py":
            continue
        for module in (a or b for a, b in PRIVATE_IMPORT.findall(path.read_text())):
            parents = {module.rsplit(".", n)[0] for n in range(module.count(".") + 1)}
            assert registered & (parents | {m for m in registered if m.startswith(module + ".")}), (
                f"{path.name} imports the private module {module}: register what it touches in distlib/compat/internals.py")


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


def test_the_worker_side_and_the_host_import_neither_tensorflow_nor_the_kernel_side():
    code = ("import sys; import nbworkers.distlib.compat.internals, nbworkers.distlib.compat.keras3_mwms, nbworkers.distlib.worker.startup;"
            " import nbworkers.distlib.compat.eager_context as ec; assert not ec.started();"
            " import nbworkers.distlib.worker.zygote, nbworkers.distlib.worker.session, nbworkers.distlib.worker.roles;"
            " from nbworkers.distlib.compat import keras_compat; keras_compat.install_fit_guard();"
            " import nbworkers.host.worker_host;"
            " print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras')"
            " or m.startswith('nbworkers.magics')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def _private_names_used(tree: ast.AST) -> set[str]:
    """``x._name`` (not on ``self`` in nbworkers' own classes) and ``getattr(x, "_name")`` in a module."""
    own_classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                   and all(isinstance(b, ast.Name) and b.id in OWN_BASES for b in node.bases)}
    on_own_self: set[int] = set()
    for klass in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name in own_classes):
        on_own_self |= {id(n) for n in ast.walk(klass) if isinstance(n, ast.Attribute)
                        and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in on_own_self:
            names.add(node.attr)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            names.add(node.args[1].value)
    return {n for n in names if n.startswith("_") and not n.startswith("__") and not n.startswith("_nbworkers")}


def _names_defined_by_nbworkers() -> set[str]:
    """Functions, classes, module-level names and attributes nbworkers' own classes set (not upstream's)."""
    defined = set()
    for path in [*DISTLIB.rglob("*.py"), *(REPO / "magics").rglob("*.py"), *(REPO / "protocol").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
        for klass in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
                      and all(isinstance(b, ast.Name) and b.id in OWN_BASES for b in n.bases)):
            defined |= {n.attr for n in ast.walk(klass) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                        and isinstance(n.value, ast.Name) and n.value.id == "self"}
    return defined


def test_every_private_upstream_symbol_distlib_touches_is_registered_for_its_module():
    """A private name used on an upstream object in distlib/compat/X.py must be in the registry under group X (or
    X.*), so that X checks it before patching and this file tests it. Outside distlib/compat/ none is used at all."""
    ours = _names_defined_by_nbworkers() | NOT_UPSTREAM
    unregistered = {}
    for path in sorted(DISTLIB.rglob("*.py")):
        in_compat = path.parent == COMPAT
        registered = {e.attribute.split(".")[-1] for e in internals.REGISTRY
                      if in_compat and e.group.split(".")[0] == path.stem}
        names = _private_names_used(ast.parse(path.read_text())) - ours - registered
        if names:
            unregistered[str(path.relative_to(REPO))] = sorted(names)
    assert not unregistered, ("move these into distlib/compat/ and register them in distlib/compat/internals.py"
                              f" (module: names): {unregistered}")


def test_every_patch_checks_its_symbols_before_installing():
    """Each module with registered symbols asks the registry (``available`` / ``missing``) for its group(s)."""
    for group in internals.GROUPS:
        source = _module_path(group).read_text()
        assert re.search(rf"internals\.(available|missing)\(\s*(group=)?\"{re.escape(group)}\"", source), (
            f"{_module_path(group).name} never checks the group {group!r} before using it")


def test_every_group_is_a_module_of_compat():
    assert {_module_path(group).name for group in internals.GROUPS} <= {p.name for p in COMPAT.glob("*.py")}


def test_wrap_once_wraps_with_wrapt_and_never_twice():
    from nbworkers.distlib.compat.import_hooks import wrap_once

    class Upstream:
        def method(self, x, y=1):
            return x + y

    calls = []

    def wrapper(wrapped, instance, args, kwargs):
        calls.append(type(instance).__name__)
        return wrapped(*args, **kwargs) * 10

    assert wrap_once(Upstream, "method", wrapper)
    assert not wrap_once(Upstream, "method", wrapper)  # installed twice: wrapped once
    assert Upstream().method(1, y=2) == 30 and Upstream.method(Upstream(), 1) == 20
    assert calls == ["Upstream", "Upstream"]


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
