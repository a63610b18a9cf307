"""What `pip install nbworkers` gives Jupyter: `jupyter labextension list` shows the sidebar enabled and OK, `jupyter
server extension list` the server extension enabled and OK, both from this environment's prefix (the data files of
the wheel). Runs the `jupyter` command of the test interpreter's own environment, with an empty user config dir.
Marked `installed`: `make test-installed` runs it on the wheel installed in .venv-installed."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.installed
COMMAND_TIMEOUT_S = 120
JUPYTER = Path(sys.executable).parent / "jupyter"
ANSI_COLOR = re.compile(r"\x1b\[[0-9;]*m")


def jupyter(tmp_path: Path, *args: str) -> str:
    """Run this environment's `jupyter ARGS` outside the checkout; what it printed (it logs the lists to stderr)."""
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_PLATFORM_DIRS": "1"}
    done = subprocess.run([str(JUPYTER), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    shown = ANSI_COLOR.sub("", done.stdout + done.stderr)  # `enabled` and `OK` come in green
    assert done.returncode == 0, shown
    return shown


def section(listing: str, heading: str, next_heading: str) -> str:
    """The lines of ``listing`` after the line ``heading`` up to the next line that starts with ``next_heading``
    (other lines at column 0, such as an import time logged between, are part of it)."""
    lines = listing.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == heading]
    assert starts, f"no section {heading!r} in:\n{listing}"
    body = []
    for line in lines[starts[0] + 1:]:
        if line.startswith(next_heading):
            break
        body.append(line)
    return "\n".join(body)


def test_labextension_list_shows_the_sidebar_enabled_and_ok(tmp_path):
    labextensions = os.path.join(sys.prefix, "share", "jupyter", "labextensions")
    version = json.loads(Path(labextensions, "nbworkers", "package.json").read_text())["version"]  # the sidebar's own
    listing = jupyter(tmp_path, "labextension", "list")
    ours = section(listing, labextensions, "/")
    # (python, nbworkers): installed by the Python package (its install.json), not linked by hand
    assert re.search(rf"^\s+nbworkers v{re.escape(version)} enabled OK \(python, nbworkers\)$", ours, re.M), listing


def test_server_extension_list_shows_nbworkers_enabled_and_ok(tmp_path):
    listing = jupyter(tmp_path, "server", "extension", "list")
    ours = section(listing, f"Config dir: {os.path.join(sys.prefix, 'etc', 'jupyter')}", "Config dir:")
    assert re.search(r"^\s+nbworkers enabled\b", ours, re.M), listing
    version = importlib.metadata.version("nbworkers")
    assert re.search(rf"^\s+nbworkers {re.escape(version)} OK$", ours, re.M), listing  # it imports and loads
