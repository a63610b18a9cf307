"""One distribution, four code folders, one import package; never a top-level `distlib` of ours.

`distlib` is also a PyPI package (virtualenv depends on it): both a regular and an editable install must
import `nbworkers.distlib` from our folder and leave `import distlib` to the other one.
"""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIP_TIMEOUT = 600

PROBE = """
import importlib.util, json, sys
import nbworkers, nbworkers.distlib, nbworkers.magics, nbworkers.kernelspec
spec = importlib.util.find_spec("distlib")
print(json.dumps({
    "nbworkers": nbworkers.__file__,
    "distlib_ours": nbworkers.distlib.__file__,
    "top_level_distlib": spec.origin if spec else None,
    "tensorflow_imported": "tensorflow" in sys.modules,
}))
"""


@pytest.mark.parametrize("editable", [False, True], ids=["install", "editable"])
def test_install_maps_the_folders_into_nbworkers(tmp_path: Path, editable: bool):
    env_dir = tmp_path / "venv"
    # system site packages: reuse the test environment's dependencies instead of downloading them again
    venv.EnvBuilder(with_pip=True, system_site_packages=True).create(env_dir)
    python = env_dir / "bin" / "python"
    target = ["-e", str(ROOT)] if editable else [str(ROOT)]
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", *target],
        check=True, timeout=PIP_TIMEOUT, cwd=tmp_path,
    )
    out = subprocess.run([str(python), "-c", PROBE], check=True, capture_output=True, text=True, cwd=tmp_path)
    import json

    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(found["distlib_ours"]).parent.name == "distlib"
    if editable:
        assert Path(found["distlib_ours"]).resolve() == (ROOT / "distlib" / "__init__.py").resolve()
    else:
        assert "site-packages/nbworkers/distlib" in found["distlib_ours"]
    # our folder is never importable as a top-level `distlib` (that name belongs to PyPI's distlib)
    assert found["top_level_distlib"] is None or not Path(found["top_level_distlib"]).resolve().is_relative_to(ROOT)
    assert found["tensorflow_imported"] is False
    # a regular install brings the config that enables the server extension (setuptools' editable installs
    # skip data files: `make setup` enables it with `jupyter server extension enable --sys-prefix`)
    config = env_dir / "etc" / "jupyter" / "jupyter_server_config.d" / "nbworkers.json"
    assert config.exists() or editable
    # ... and the prebuilt sidebar where JupyterLab and Notebook 7 look (editable: `make setup` links it there)
    labextension = env_dir / "share" / "jupyter" / "labextensions" / "nbworkers"
    if not editable:
        assert (labextension / "package.json").is_file() and (labextension / "install.json").is_file()
        assert list((labextension / "static").glob("remoteEntry.*.js"))
        assert (labextension / "schemas" / "nbworkers" / "sidebar.json").is_file()  # its settings
        package_data = Path(found["nbworkers"]).parent / "labextension"  # also inside the package
        assert (package_data / "package.json").is_file() and list((package_data / "static").glob("remoteEntry.*.js"))
