"""What ships: the wheel holds the tree, installs into nbworkers, and uninstalls without leaving its data files.

One distribution, seven code folders, one import package; never a top-level `distlib` of ours. `distlib` is also a
PyPI package (virtualenv depends on it): both a regular and an editable install must import `nbworkers.distlib` from
our folder and leave `import distlib` to the other one.

The wheel is the one `make wheel` built when NBWORKERS_WHEEL names it (dist/nbworkers-<version>-py3-none-any.whl,
the sdist beside it), else `python -m build` builds one here (the sdist, then the wheel from the sdist, as users'
pip does), so the comparison with the tree also checks that the sdist is whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIP_TIMEOUT = 600
BUILD_TIMEOUT = 600
WHEEL_ENV = "NBWORKERS_WHEEL"

# Non-Python files of the code folders that do not ship: the build stamp tools/labextension_stamp.py checks the
# prebuilt sidebar against its TypeScript sources with.
DEV_ONLY = {"extension/labextension/sources.sha256"}
LABEXTENSION = "share/jupyter/labextensions/nbworkers"
SERVER_CONFIG = "etc/jupyter/jupyter_server_config.d/nbworkers.json"

PROBE = """
import importlib.util, json, sys
import nbworkers, nbworkers.distlib, nbworkers.distlib.saved_state, nbworkers.magics, nbworkers.kernelspec
spec = importlib.util.find_spec("distlib")
print(json.dumps({
    "nbworkers": nbworkers.__file__,
    "version": nbworkers.__version__,
    "distlib_ours": nbworkers.distlib.__file__,
    "top_level_distlib": spec.origin if spec else None,
    "tensorflow_imported": "tensorflow" in sys.modules,
}))
"""


def _pyproject() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def expected_wheel_files(root: Path = ROOT) -> set[str]:
    """Every file of the tree that must be in the wheel, under its path there (the .dist-info aside)."""
    project = _pyproject()
    data = f"nbworkers-{project['project']['version']}.data/data"
    expected = {f"{data}/{SERVER_CONFIG}", f"{data}/{LABEXTENSION}/install.json"}
    for package, folder in project["tool"]["setuptools"]["package-dir"].items():
        base = root / folder
        for path in base.rglob("*"):
            relative = path.relative_to(root).as_posix()
            if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc" or relative in DEV_ONLY:
                continue
            expected.add("/".join([*package.split("."), *path.relative_to(base).parts]))
    sidebar = root / "extension" / "labextension"  # also where JupyterLab and Notebook 7 look for it
    expected |= {f"{data}/{LABEXTENSION}/{path.relative_to(sidebar).as_posix()}" for path in sidebar.rglob("*")
                 if path.is_file() and path.relative_to(root).as_posix() not in DEV_ONLY}
    return expected


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if ".dist-info/" not in name}


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    """The wheel (and sdist, when there is one) to check: `make wheel`'s via NBWORKERS_WHEEL, else built here."""
    given = os.environ.get(WHEEL_ENV)
    if given:
        wheel = Path(given).resolve()
        assert wheel.is_file() and wheel.suffix == ".whl", f"{WHEEL_ENV}={given}: no such wheel (run `make wheel`)"
        version = _pyproject()["project"]["version"]
        assert wheel.name == f"nbworkers-{version}-py3-none-any.whl", (
            f"{WHEEL_ENV}={given} is not this tree's version {version}: run `make wheel` again")
        sdist = wheel.with_name(f"nbworkers-{version}.tar.gz")
        return {"wheel": wheel, **({"sdist": sdist} if sdist.is_file() else {})}
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], check=True,
                   capture_output=True, timeout=BUILD_TIMEOUT)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_the_wheel_holds_every_file_of_the_tree_and_nothing_else(dist):
    shipped = wheel_files(dist["wheel"])
    expected = expected_wheel_files()
    assert not expected - shipped, f"in the tree, not in the wheel: {sorted(expected - shipped)}"
    assert not shipped - expected, f"in the wheel, not from the tree: {sorted(shipped - expected)}"
    assert "nbworkers/distlib/saved_state/objects.py" in shipped  # the module the hand-kept list had left out
    for kind in ("wheel", "sdist"):
        if kind in dist:
            checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(dist[kind])],
                                     capture_output=True, text=True, timeout=PIP_TIMEOUT)
            assert checked.returncode == 0, checked.stdout + checked.stderr


def _venv(tmp_path: Path) -> Path:
    env_dir = tmp_path / "venv"
    # system site packages: reuse the test environment's dependencies instead of downloading them again
    venv.EnvBuilder(with_pip=True, system_site_packages=True).create(env_dir)
    return env_dir


def _probe(python: Path, cwd: Path) -> dict:
    out = subprocess.run([str(python), "-c", PROBE], check=True, capture_output=True, text=True, cwd=cwd)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(found["distlib_ours"]).parent.name == "distlib"
    # our folder is never importable as a top-level `distlib` (that name belongs to PyPI's distlib)
    assert found["top_level_distlib"] is None or not Path(found["top_level_distlib"]).resolve().is_relative_to(ROOT)
    assert found["tensorflow_imported"] is False
    assert found["version"] == _pyproject()["project"]["version"]  # from the installed metadata
    return found


def _pip(python: Path, *args: str, cwd: Path) -> None:
    subprocess.run([str(python), "-m", "pip", *args], check=True, timeout=PIP_TIMEOUT, cwd=cwd)


def test_the_wheel_installs_into_nbworkers_and_uninstalls_without_leftovers(tmp_path: Path, dist):
    env_dir = _venv(tmp_path)
    python = env_dir / "bin" / "python"
    _pip(python, "install", "-q", "--no-deps", str(dist["wheel"]), cwd=tmp_path)
    found = _probe(python, tmp_path)
    assert "site-packages/nbworkers/distlib" in found["distlib_ours"]
    # the config that enables the server extension, and the prebuilt sidebar where JupyterLab and Notebook 7 look
    config = env_dir / SERVER_CONFIG
    labextension = env_dir / LABEXTENSION
    assert config.is_file()
    assert (labextension / "package.json").is_file() and (labextension / "install.json").is_file()
    assert list((labextension / "static").glob("remoteEntry.*.js"))
    assert (labextension / "schemas" / "nbworkers" / "sidebar.json").is_file()  # its settings
    package = Path(found["nbworkers"]).parent
    assert (package / "labextension" / "package.json").is_file()  # also inside the package
    assert (package / "magics" / "views" / "vendor-uplot" / "uPlot.iife.min.js").is_file()

    _pip(python, "uninstall", "-y", "-q", "nbworkers", cwd=tmp_path)
    assert not labextension.exists(), sorted(p.name for p in labextension.rglob("*"))
    assert not config.exists()
    assert not package.exists()


def test_editable_install_maps_the_folders_into_nbworkers(tmp_path: Path):
    env_dir = _venv(tmp_path)
    python = env_dir / "bin" / "python"
    _pip(python, "install", "-q", "--no-deps", "-e", str(ROOT), cwd=tmp_path)
    found = _probe(python, tmp_path)
    assert Path(found["distlib_ours"]).resolve() == (ROOT / "distlib" / "__init__.py").resolve()
