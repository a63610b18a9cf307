"""The fences between the parts, checked from the source alone (no kernel, no TensorFlow, no subprocess).

- Every import of a private TensorFlow/Keras module (``tensorflow.python…``, ``tensorflow.core…``, ``keras.src…``,
  ``tf_keras.src…``, ``tensorflow_estimator.python…``), function-level ones and module names given as strings
  included, is under ``distlib/compat/`` (registered in ``internals``; tests/unit/test_compat_internals.py checks the registry).
- The import-cycle check tools/lint.py runs over nbworkers finds a ring closed by a function-level import.
- The eager-context questions the worker side asks never import TensorFlow.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPAT = REPO / "distlib" / "compat"
PACKAGE_FOLDERS = ("extension", "protocol", "procs", "host", "magics", "distlib", "kernelspec")
PRIVATE_MODULE = r"(?:tensorflow\.(?:python|core|compiler)|keras\.src|tf_keras\.src|tensorflow_estimator\.python)[\w.]*"


def private_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import of a private TensorFlow/Keras module, and every string naming one (given to
    importlib, ``when_imported``, ``sys.modules``): function-level imports included."""
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        found += [(node.lineno, name) for name in names if re.fullmatch(PRIVATE_MODULE, name)]
    return found


def test_no_file_outside_compat_imports_a_private_tensorflow_or_keras_module():
    outside = []
    for folder in PACKAGE_FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if COMPAT in path.parents:
                continue
            outside += [f"{path.relative_to(REPO)}:{line}: {name}"
                        for line, name in private_imports(ast.parse(path.read_text()))]
    assert not outside, ("private TensorFlow/Keras modules outside distlib/compat/ (move the code there, register it"
                         " in distlib/compat/internals.py, and call a function of compat instead):\n" + "\n".join(outside))


def test_the_fence_check_finds_private_imports_also_inside_functions_and_as_strings():
    code = ("import os\ndef f():\n    from tensorflow.python.eager import context\n    import keras.src.trainers\n"
            "    return sys.modules.get('tf_keras.src.callbacks'), 'keras.src is private'\nfrom tensorflow import nest\n")
    assert [name for _, name in private_imports(ast.parse(code))] == [
        "tensorflow.python.eager", "tensorflow.python.eager.context", "keras.src.trainers", "tf_keras.src.callbacks"]


def _lint_tool():
    spec = importlib.util.spec_from_file_location("nbworkers_lint_tool", REPO / "tools" / "lint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cycle_check_finds_a_ring_closed_by_a_function_level_import(tmp_path, monkeypatch):
    package = tmp_path / "ringpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from ringpkg import b\n")
    (package / "b.py").write_text("from ringpkg import c\n")
    (package / "c.py").write_text("def later():\n    from ringpkg import a\n    return a\n")
    (package / "d.py").write_text("from ringpkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _lint_tool().import_cycles("ringpkg") == [["ringpkg.a", "ringpkg.b", "ringpkg.c"]]


def test_asking_whether_the_eager_context_started_imports_no_tensorflow():
    if "tensorflow" in sys.modules:
        pytest.skip("TensorFlow was imported by another test in this process")
    from nbworkers.distlib.compat import eager_context

    assert eager_context.started() is False
    assert eager_context.abort_collectives("a peer gave up", "only interrupted") is False
    assert "tensorflow" not in sys.modules
