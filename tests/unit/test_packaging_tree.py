"""The wheel's packages are the folders': setup.py finds every package under pyproject.toml's package-dir mapping.

A folder of modules without an ``__init__.py`` would not be found (and would not ship): every folder holding a
``.py`` under the seven code folders must be a package. tests/integration/test_packaging.py builds the wheel and
compares its files with the tree.
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _setup_module():
    spec = importlib.util.spec_from_file_location("nbworkers_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not __main__: setup() is not called
    return module


def _mapping() -> dict[str, str]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["tool"]["setuptools"]["package-dir"]


def _code_folders_with_modules() -> dict[str, Path]:
    """import name -> folder, for every folder under the mapped folders that holds a .py."""
    found: dict[str, Path] = {}
    for package, folder in _mapping().items():
        base = ROOT / folder
        for module in base.rglob("*.py"):
            relative = module.parent.relative_to(base)
            found[".".join([package, *relative.parts])] = module.parent
    return found


def test_the_mapping_names_the_seven_code_folders_under_nbworkers():
    mapping = _mapping()
    assert set(mapping.values()) == {"extension", "protocol", "procs", "host", "magics", "distlib", "kernelspec"}
    assert all(name == "nbworkers" or name.startswith("nbworkers.") for name in mapping)


def test_every_folder_with_modules_is_a_package():
    missing = sorted(str(folder.relative_to(ROOT)) for folder in _code_folders_with_modules().values()
                     if not (folder / "__init__.py").is_file())
    assert not missing, f"add an __init__.py to {missing}: setup.py finds packages by it, and these would not ship"


def test_setup_finds_every_package_of_the_tree_and_nothing_else():
    packages = _setup_module().nbworkers_packages()
    assert packages == sorted(_code_folders_with_modules())
    assert "nbworkers.distlib.saved_state" in packages  # the one the hand-kept list had missed
    assert all(name.startswith("nbworkers") for name in packages)  # never a top-level distlib/magics/...
