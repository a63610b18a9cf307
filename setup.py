"""The packages of the wheel, found in the code folders (everything else is in pyproject.toml).

pyproject.toml's ``[tool.setuptools] package-dir`` maps seven folders into one import package, ``nbworkers``
(extension/ -> nbworkers, magics/ -> nbworkers.magics, ...). setuptools' own discovery cannot follow that mapping
(it would name magics/views ``views``, not ``nbworkers.magics.views``), so this file walks each mapped folder and
names every sub-package under its mapped name: a sub-package added later ships without anyone editing a list.
A folder of modules needs an ``__init__.py`` to be found (tests/unit/test_packaging_tree.py checks every one has
it; tests/integration/test_packaging.py compares a built wheel's files with the tree).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent


def package_dirs(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """pyproject.toml's mapping: import package -> folder."""
    with pyproject.open("rb") as file:
        return dict(tomllib.load(file)["tool"]["setuptools"]["package-dir"])


def nbworkers_packages(root: Path = ROOT) -> list[str]:
    """Every package of the mapped folders under its import name, sorted."""
    mapping = package_dirs(root / "pyproject.toml")
    found = set(mapping)
    for package, folder in mapping.items():
        found.update(f"{package}.{sub}" for sub in find_packages(str(root / folder)))
    return sorted(found)


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import it for nbworkers_packages
    setup(packages=nbworkers_packages())
