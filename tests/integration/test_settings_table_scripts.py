"""The settings tables checked from fresh interpreters: the site's environment table is what tools/env_table.py
renders (written at each build of the site by docs/_ext/nbworkers_docs.py, included by its Environment variables
page), and the tables import no TensorFlow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from nbworkers.protocol import env_settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_sites_table_is_generated_from_the_settings_table(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "_ext" / "nbworkers_docs.py"), str(tmp_path)],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    table = (tmp_path / "env-table.md").read_text(encoding="utf-8")
    printed = subprocess.run([sys.executable, str(ROOT / "tools" / "env_table.py")], capture_output=True, text=True,
                             timeout=60)
    assert printed.returncode == 0 and printed.stdout == table, printed.stderr
    for setting in env_settings.ALL:
        assert f"| `{setting.name}` |" in table
    page = (ROOT / "docs" / "reference" / "environment.md").read_text(encoding="utf-8")
    assert "```{include} ../_generated/env-table.md" in page


def test_the_table_imports_no_tensorflow():
    code = "import sys, nbworkers.protocol.env_settings, nbworkers.magics.settings; print('tensorflow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
