"""Writing, installing and removing the nbworkers kernelspec (through jupyter_client's KernelSpecManager)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from nbworkers import __version__
from nbworkers.kernelspec import DEFAULT_DISPLAY_NAME, DEFAULT_NAME

LAUNCH_MODULE = "nbworkers.kernelspec.launch"
EXTENSION_ARGUMENT = "--IPKernelApp.extra_extensions=nbworkers"  # loads the extension as the kernel starts
LOGO_FILES = ("logo-32x32.png", "logo-64x64.png", "logo-svg.svg")


class KernelspecError(Exception):
    """A kernelspec could not be installed or removed; the message says what to do."""


def kernel_dict(display_name: str = DEFAULT_DISPLAY_NAME, python: str | None = None) -> dict[str, Any]:
    """The kernel.json of the nbworkers kernel: ipykernel's own, started through our launcher."""
    from ipykernel.kernelspec import get_kernel_dict, make_ipkernel_cmd

    spec = get_kernel_dict()
    spec["argv"] = make_ipkernel_cmd(mod=LAUNCH_MODULE, executable=python or sys.executable,
                                     extra_arguments=[EXTENSION_ARGUMENT])
    spec["display_name"] = display_name
    spec["metadata"] = {**spec.get("metadata", {}), "nbworkers": {"version": _version()}}
    return spec


def _version() -> str:
    return __version__


def write_kernel_spec(directory: Path, display_name: str, python: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kernel.json").write_text(json.dumps(kernel_dict(display_name, python), indent=1), encoding="utf-8")
    try:
        from ipykernel.kernelspec import RESOURCES
    except ImportError:
        RESOURCES = ""
    for logo in LOGO_FILES:
        source = Path(RESOURCES) / logo
        if source.is_file():
            shutil.copy(source, directory / logo)
    return directory


def _target_description(user: bool, prefix: str | None) -> str:
    if prefix:
        return f"--prefix {prefix}"
    return "--user" if user else "the system-wide Jupyter data directory"


def install(name: str = DEFAULT_NAME, display_name: str = DEFAULT_DISPLAY_NAME, user: bool = False,
            prefix: str | None = None, python: str | None = None) -> str:
    """Install the kernelspec; returns the directory it went to."""
    from jupyter_client.kernelspec import KernelSpecManager

    if user and prefix:
        raise KernelspecError("choose one of --user, --sys-prefix and --prefix, not several.")
    with tempfile.TemporaryDirectory(prefix="nbworkers-kernelspec-") as tmp:
        source = write_kernel_spec(Path(tmp) / name, display_name, python)
        try:
            return KernelSpecManager().install_kernel_spec(str(source), kernel_name=name, user=user, prefix=prefix)
        except ValueError as error:  # an invalid kernel name
            raise KernelspecError(f"--name {name!r}: {error}") from None
        except OSError as error:
            where = getattr(error, "filename", None) or "the kernels directory"
            raise KernelspecError(
                f"cannot install the kernelspec into {_target_description(user, prefix)}: {where} is not writable"
                f" ({error.strerror or error}).\n"
                "Install it for your user with `python -m nbworkers.kernelspec install --user`, into this"
                " environment with --sys-prefix, or choose a writable directory with --prefix PATH."
            ) from None


def find_installed(name: str, user: bool = False, prefix: str | None = None) -> Path | None:
    """Where the kernelspec ``name`` is installed for that target (None when it is not)."""
    from jupyter_client.kernelspec import KernelSpecManager

    manager = KernelSpecManager()
    if prefix:
        base = Path(prefix) / "share" / "jupyter" / "kernels"
    elif user:
        base = Path(manager.user_kernel_dir)
    else:
        base = None
    if base is not None:
        candidate = base / name.lower()
        return candidate if (candidate / "kernel.json").is_file() else None
    try:
        return Path(manager.get_kernel_spec(name.lower()).resource_dir)
    except Exception:  # jupyter_client raises NoSuchKernel (a KeyError) or others
        return None


def uninstall(name: str = DEFAULT_NAME, user: bool = False, prefix: str | None = None) -> str:
    """Remove an installed kernelspec; returns the directory removed."""
    if user and prefix:
        raise KernelspecError("choose one of --user, --sys-prefix and --prefix, not several.")
    directory = find_installed(name, user=user, prefix=prefix)
    if directory is None:
        raise KernelspecError(
            f"no kernelspec named {name!r} installed in {_target_description(user, prefix)}."
            " `jupyter kernelspec list` shows the installed ones."
        )
    try:
        kernel = json.loads((directory / "kernel.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        kernel = {}
    if LAUNCH_MODULE not in kernel.get("argv", []):
        raise KernelspecError(
            f"the kernelspec {name!r} at {directory} is not an nbworkers kernel; not removing it."
            " Use `jupyter kernelspec remove` for other kernels."
        )
    try:
        shutil.rmtree(directory)
    except OSError as error:
        raise KernelspecError(
            f"cannot remove {directory}: {error.strerror or error}. Run with permission to write there."
        ) from None
    return str(directory)
