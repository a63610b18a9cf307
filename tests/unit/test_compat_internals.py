"""The registry of private TensorFlow / Keras symbols (``distlib/compat/internals.py``) against nbworkers' own
sources, without importing TensorFlow: every entry is documented and used by the module it names, every private
module and symbol distlib touches is registered, every patch checks its symbols first, and ``wrap_once`` wraps
once. The symbols against the installed packages: tests/integration/test_compat_internals_installed.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from nbworkers.distlib.compat import internals

REPO = Path(__file__).resolve().parents[2]
DISTLIB = REPO / "distlib"
COMPAT = DISTLIB / "compat"


def _module_path(group: str) -> Path:
    """The module of a registry group: ``distlib/compat/<group>.py``, ``keras3/mwms`` a module of a subpackage
    (``<module>.<part>``: that module's part)."""
    return COMPAT / f"{group.split('.')[0]}.py"


TF215_PYTHON = REPO / ".venv-tf215" / "bin" / "python"  # `make estimator-env`: TensorFlow 2.15 + tf.estimator
PRIVATE_MODULE = r"(?:tensorflow\.(?:python|core|compiler)|keras\.src|tf_keras\.src|tensorflow_estimator\.python)[\w.]*"
PRIVATE_IMPORT = re.compile(rf"(?:from|import)\s+({PRIVATE_MODULE})|[\"']({PRIVATE_MODULE})[\"']")
# Private names distlib uses that are not TensorFlow's/Keras's: the standard library's, and the state nbworkers'
# own subclasses of upstream classes keep (estimator.ReportHook, keras_fit's save-on-SIGTERM callback). The
# standard library's: os._exit, and atexit._run_exitfuncs (the bootstrap runs the atexit functions before os._exit).
NOT_UPSTREAM = {"_exit", "_run_exitfuncs", "_every", "_loss", "_guard", "_batch"}
# Base classes that keep a class nbworkers' own (its attributes are not upstream's): the mixin of tf_keras's
# callback protocol declares upstream names itself, in compat/, where they are registered.
OWN_BASES = ("object", "Exception", "RuntimeError", "ValueError", "TfKerasProtocol")


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


def _group_of(path: Path) -> str:
    """The registry group of a module of distlib/compat/: its path there without ``.py`` (``keras3/mwms``)."""
    return path.relative_to(COMPAT).with_suffix("").as_posix()


def test_every_private_upstream_symbol_distlib_touches_is_registered_for_its_module():
    """A private name used on an upstream object in distlib/compat/X.py (X may be keras3/mwms) must be in the registry
    under group X (or X.*), so that X checks it before patching and this file tests it. Outside distlib/compat/ none
    is used at all."""
    ours = _names_defined_by_nbworkers() | NOT_UPSTREAM
    unregistered = {}
    for path in sorted(DISTLIB.rglob("*.py")):
        in_compat = COMPAT in path.parents
        registered = {e.attribute.split(".")[-1] for e in internals.REGISTRY
                      if in_compat and e.group.split(".")[0] == _group_of(path)}
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
    assert {_module_path(group) for group in internals.GROUPS} <= set(COMPAT.rglob("*.py"))
    assert {"keras3/mwms", "jax/backends"} <= {group.split(".")[0] for group in internals.GROUPS}  # subpackages too


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


# ------------------------------------------------------------------------- Keras's warning about a shuffle never passed
class _Dataset:  # stands for a tf.data.Dataset (unit tests import no TensorFlow)
    pass


def _is_dataset(x) -> bool:
    return isinstance(x, _Dataset)


def test_fit_of_a_dataset_without_shuffle_passes_shuffle_false_so_keras_does_not_warn():
    from nbworkers.distlib.compat.keras3.fit_guard import quiet_dataset_shuffle

    data = _Dataset()
    assert quiet_dataset_shuffle((data,), {"epochs": 2}, _is_dataset) == {"epochs": 2, "shuffle": False}
    assert quiet_dataset_shuffle((), {"x": data}, _is_dataset) == {"x": data, "shuffle": False}
    # the user's own shuffle (keyword or 9th positional) and data Keras does shuffle (arrays) are left alone
    assert quiet_dataset_shuffle((data,), {"shuffle": True}, _is_dataset) == {"shuffle": True}
    positional = (data, None, None, 1, "auto", None, 0.0, None, True)
    assert quiet_dataset_shuffle(positional, {}, _is_dataset) == {}
    assert quiet_dataset_shuffle(([1.0, 2.0],), {}, _is_dataset) == {}
    assert quiet_dataset_shuffle((), {}, _is_dataset) == {}
