"""One version, written once (pyproject.toml), shown by `%workers --version`, the listing, and the bug-report line."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

import nbworkers
from nbworkers.magics.notebook import magic
from nbworkers.magics.notebook.magic import WorkerMagics

ROOT = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("extension", "protocol", "procs", "host", "magics", "distlib", "kernelspec")


def _pyproject_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["project"]["version"]


def test_the_version_comes_from_the_package_metadata():
    assert nbworkers.__version__ == version("nbworkers"), "nbworkers.__version__ is the installed metadata's"
    assert nbworkers.__version__ == _pyproject_version(), (
        "the installed metadata is older than pyproject.toml's version: `make setup` re-installs")


def test_the_version_is_written_nowhere_else_in_the_code():
    written = _pyproject_version()
    copies = [str(path.relative_to(ROOT)) for folder in CODE_FOLDERS for path in (ROOT / folder).rglob("*.py")
              if f'"{written}"' in path.read_text(encoding="utf-8")]
    assert not copies, f"the version is written in {copies}: read nbworkers.__version__ instead"


def test_workers_version_prints_the_version_and_a_bug_report_line(capsys):
    assert WorkerMagics().workers("--version") is None
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"nbworkers {nbworkers.__version__}"
    report = next(line.strip() for line in lines if line.strip().startswith("nbworkers ") and "Python" in line)
    assert report.startswith(f"nbworkers {nbworkers.__version__}, Python 3.")
    assert "TensorFlow " in report and "ray" in report  # installed or "ray: not installed"
    tensorflow = version("tensorflow")  # read from metadata: nothing imported it
    assert f"TensorFlow {tensorflow}" in report


def test_workers_help_still_prints_the_usage_and_names_version(capsys):
    WorkerMagics().workers("--help")
    usage = capsys.readouterr().out
    assert usage.startswith("usage: %workers") and "--version" in usage and "--tail" in usage
    # issue 43: the actions, one a line, come first, not after "positional arguments"
    actions = [line.split()[0] for line in usage.split("positional arguments")[0].splitlines()[3:] if line.strip()]
    assert actions == ["(no", "logs", "stop", "wait", "attach", "tensorboard", "resize", "restore", "--version"]


def test_the_listing_ends_with_the_version():
    text, page = magic._cluster_table()  # no clusters in this process
    assert text.splitlines()[0].startswith("no clusters yet")
    assert text.splitlines()[-1].startswith(f"nbworkers {nbworkers.__version__} ")
    assert f"nbworkers {nbworkers.__version__} " in page


def test_without_the_metadata_the_version_says_unknown(monkeypatch):
    from importlib.metadata import PackageNotFoundError

    from nbworkers import version as version_module

    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(version_module, "version", missing)
    version_module.installed_version.cache_clear()
    try:
        assert version_module.installed_version() == version_module.UNKNOWN_VERSION == "0+unknown"
    finally:
        version_module.installed_version.cache_clear()


def test_the_listing_calls_a_run_whose_kernel_is_gone_stopped_as_every_view_does(monkeypatch):
    """Issue 34: after a kernel restart `%workers` said "lost" where the widget, the sidebar and attach say stopped."""
    snap = {"name": "old", "backend": "local", "workers": [], "status": "lost", "restarts": 0, "wall_time": 1.0,
            "run_dir": "/tmp/runs/old"}

    class Attached:
        def snapshot(self):
            return dict(snap)

    monkeypatch.setattr(magic.registry, "all_clusters", lambda: [Attached()])
    text, page = magic._cluster_table()
    row = text.splitlines()[1]
    assert row.startswith("old") and "stopped (its kernel restarted or died)" in row and " lost " not in row
    assert "stopped (its kernel restarted or died)" in page
