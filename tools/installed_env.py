"""Make .venv-installed: nbworkers installed from the wheel `make wheel` built (not editable), with its extras.

    python3 tools/installed_env.py --venv .venv-installed --wheel dist/nbworkers-VERSION-py3-none-any.whl \
        --extras test,ray,tensorboard --base-python /usr/bin/python3 --with 'jupyterhub==6.1.*'

`make installed-env` runs it after `make wheel`; `make test-installed` runs the tests marked `installed` there. A
re-run is cheap: the stamp (VENV/.installed) records the wheel's content (its RECORD: a hash of every file, unlike
the wheel file itself, which changes with every build) and its dependencies. Same content: nothing to do. Other
content, same dependencies: nbworkers alone is reinstalled. Other dependencies (or extras): a fresh venv, so a
dependency the package stopped declaring is not still there by chance. Dependencies come from the registry (pip's
cache). ``--with`` adds requirements beside the wheel (JupyterHub, for the hub test: the hub's environment is the
one nbworkers is installed in). ``--base-python`` is the interpreter the venv is made from: the JupyterHub test's
users run the venv too, so it must be one every user can read (``/usr/bin/python3``; pyenv's under /root is not).
Then it checks that the venv imports nbworkers from its own site-packages, never from the checkout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

STAMP_NAME = ".installed"
PIP_TIMEOUT_S = 1800  # a fresh venv's dependencies (TensorFlow, JupyterLab, Ray...) from pip's cache on 2 cores

PROBE = """
import importlib.metadata, json, sys, sysconfig
import nbworkers
dist = importlib.metadata.distribution("nbworkers")
print(json.dumps({"file": nbworkers.__file__, "purelib": sysconfig.get_paths()["purelib"], "prefix": sys.prefix,
                  "direct_url": json.loads(dist.read_text("direct_url.json") or "{}")}))
"""


def wheel_identity(wheel: Path, extras: str, base_python: str, also: list[str]) -> dict[str, str]:
    """What decides whether the venv is up to date: the files' hashes and the declared dependencies."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        content = hashlib.sha256(archive.read(record)).hexdigest()
        requires = [line for line in archive.read(metadata).decode().splitlines()
                    if line.startswith(("Requires-Dist:", "Requires-Python:", "Provides-Extra:"))]
    dependencies = hashlib.sha256("\n".join([extras, base_python, *also, *requires]).encode()).hexdigest()
    return {"content": content, "dependencies": dependencies}


def read_stamp(stamp: Path) -> dict[str, str]:
    try:
        return json.loads(stamp.read_text())
    except (OSError, ValueError):
        return {}


def pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", *args], check=True, timeout=PIP_TIMEOUT_S)


def install(venv: Path, wheel: Path, extras: str, identity: dict[str, str], base_python: str, also: list[str]) -> None:
    python = venv / "bin" / "python"
    stamp = venv / STAMP_NAME
    recorded = read_stamp(stamp)
    if python.exists() and recorded == identity:
        print(f"installed_env: {venv} is up to date with {wheel.name}")
        return
    fresh = not python.exists() or recorded.get("dependencies") != identity["dependencies"]
    stamp.unlink(missing_ok=True)
    if fresh:
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([base_python, "-m", "venv", str(venv)], check=True)
        pip(python, "--upgrade", "pip")
        print(f"installed_env: a fresh {venv}: {wheel.name}[{extras}]")
        pip(python, f"{wheel.resolve()}[{extras}]", *also)
    else:  # the same dependencies: only nbworkers changed
        print(f"installed_env: {venv}: reinstalling nbworkers from {wheel.name}")
        pip(python, "--no-deps", "--force-reinstall", str(wheel.resolve()))
    stamp.write_text(json.dumps(identity))


def check_imports_from_venv(venv: Path, checkout: Path) -> None:
    """From the checkout's root (where `python -m` would put folders named distlib, magics... first on the path),
    the venv's interpreter must import nbworkers from its own site-packages, installed from a wheel file."""
    out = subprocess.run([str(venv / "bin" / "python"), "-c", PROBE], cwd=checkout, check=True, capture_output=True,
                         text=True, timeout=120)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    module = Path(found["file"]).resolve()
    purelib = Path(found["purelib"]).resolve()
    if not module.is_relative_to(purelib) or not purelib.is_relative_to(venv.resolve()):
        sys.exit(f"installed_env: {venv} imports nbworkers from {module}, not from its site-packages {purelib}")
    if found["direct_url"].get("dir_info", {}).get("editable"):
        sys.exit(f"installed_env: nbworkers in {venv} is an editable install: remove {venv} and run again")
    print(f"installed_env: {venv} imports nbworkers from {module.parent}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, required=True)
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--extras", default="test,ray,tensorboard")
    parser.add_argument("--base-python", default=sys.executable, help="the interpreter the venv is made from")
    parser.add_argument("--with", dest="also", action="append", default=[], help="another requirement to install")
    args = parser.parse_args()
    wheel = args.wheel
    if not wheel.is_file():
        sys.exit(f"installed_env: no wheel at {wheel}: run `make wheel`")
    identity = wheel_identity(wheel, args.extras, args.base_python, args.also)
    install(args.venv, wheel, args.extras, identity, args.base_python, args.also)
    check_imports_from_venv(args.venv, Path.cwd())


if __name__ == "__main__":
    main()
