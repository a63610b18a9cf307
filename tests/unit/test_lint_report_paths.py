"""tools/lint.py's mypy report names files by their repository paths (not the nbworkers package's)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lint_tool():
    spec = importlib.util.spec_from_file_location("nbworkers_lint_tool", ROOT / "tools" / "lint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mypy_report_paths_are_the_repository_paths():
    lint = _lint_tool()
    assert lint._to_repo_path("nbworkers/magics/run/cluster.py:3: error: x") == "magics/run/cluster.py:3: error: x"
    assert lint._to_repo_path("nbworkers/serverext.py:3: error: x") == "extension/serverext.py:3: error: x"
    assert lint._to_repo_path("Found 2 errors") == "Found 2 errors"
