"""The sidebar's packaging: the committed build matches its TypeScript sources, and this environment's
JupyterLab lists it enabled (``make setup`` links the build into ``.venv/share/jupyter/labextensions``; a regular
``pip install`` copies it there: tests/integration/test_packaging.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from browser_helpers import REPO

LIST_TIMEOUT = 120


def test_the_committed_build_is_built_from_the_current_sources():
    result = subprocess.run([sys.executable, str(REPO / "tools" / "labextension_stamp.py")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    built = json.loads((REPO / "extension" / "labextension" / "package.json").read_text())
    source = json.loads((REPO / "labextension" / "package.json").read_text())
    assert built["name"] == source["name"] == "nbworkers" and built["version"] == source["version"]
    assert (REPO / "extension" / "labextension" / built["jupyterlab"]["_build"]["load"]).is_file()


def test_jupyterlab_lists_the_sidebar_enabled():
    result = subprocess.run([sys.executable, "-m", "jupyterlab.labextensions", "list"], capture_output=True,
                            text=True, timeout=LIST_TIMEOUT)
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip().startswith("nbworkers ")]
    assert lines, result.stdout + result.stderr
    assert "enabled" in lines[0] and "OK" in lines[0], lines[0]
