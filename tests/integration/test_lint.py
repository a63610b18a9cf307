"""The package passes its linter (ruff), its type checker (mypy, non-strict) and its import contracts
(import-linter, plus no import cycle between modules), as configured in pyproject.toml, and status words are
strings only in protocol/ and enums (tools/status_words.py).

Run the same by hand, with the findings listed: ``.venv/bin/python tools/lint.py`` (or ``... ruff`` / ``... mypy`` /
``... imports`` / ``... words``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lint_tool():
    spec = importlib.util.spec_from_file_location("nbworkers_lint_tool", ROOT / "tools" / "lint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("tool", ["ruff", "mypy", "imports", "words"])
def test_package_is_clean(tool):
    installed = (importlib.util.find_spec("importlinter") is not None if tool == "imports"
                 else True if tool == "words"  # an AST walk (tools/status_words.py): nothing to install
                 else (Path(sys.executable).parent / tool).exists())
    if not installed:
        pytest.fail(f"{tool} is not installed: pip install -e '.[test]'")
    lint = _lint_tool()
    code, report = {"ruff": lint.run_ruff, "mypy": lint.run_mypy, "imports": lint.run_imports,
                    "words": lint.run_status_words}[tool]()
    assert code == 0, f"{tool} found problems (run: .venv/bin/python tools/lint.py {tool}):\n{report}"
