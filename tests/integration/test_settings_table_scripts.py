"""The settings tables checked from fresh interpreters: the README's table is what tools/env_table.py generates,
and the tables import no TensorFlow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from nbworkers.protocol import env_settings

ROOT = Path(__file__).resolve().parents[2]


def test_readme_table_is_generated_from_the_settings_table():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "env_table.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for setting in env_settings.ALL:
        assert f"| `{setting.name}` |" in readme


def test_the_table_imports_no_tensorflow():
    code = "import sys, nbworkers.protocol.env_settings, nbworkers.magics.settings; print('tensorflow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
