"""The command line: ``python -m nbworkers.kernelspec {install,uninstall} ...``."""

from __future__ import annotations

import argparse
import sys

from nbworkers.kernelspec import DEFAULT_DISPLAY_NAME, DEFAULT_NAME
from nbworkers.kernelspec.install import KernelspecError, install, uninstall

DESCRIPTION = (
    "Install or remove the nbworkers Jupyter kernel: a Python kernel that loads the nbworkers extension at"
    " start (so %%worker works without %load_ext) and hides the GPUs from the kernel process itself while"
    " the workers still get them."
)


def _add_target(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="for the current user (~/.local/share/jupyter)")
    where.add_argument("--sys-prefix", action="store_true",
                       help=f"into this Python environment ({sys.prefix}/share/jupyter)")
    where.add_argument("--prefix", metavar="PATH", help="into PATH/share/jupyter/kernels")
    parser.add_argument("--name", default=DEFAULT_NAME, help=f"the kernelspec's name (default {DEFAULT_NAME!r})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nbworkers.kernelspec", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", metavar="{install,uninstall}")
    commands.required = True
    install_parser = commands.add_parser(
        "install", help="install the kernel", description="Install the nbworkers kernel. Without --user,"
        " --sys-prefix or --prefix it goes to the system-wide Jupyter data directory.")
    _add_target(install_parser)
    install_parser.add_argument("--display-name", default=DEFAULT_DISPLAY_NAME,
                                help=f"the name shown in Jupyter (default {DEFAULT_DISPLAY_NAME!r})")
    uninstall_parser = commands.add_parser("uninstall", help="remove the kernel",
                                           description="Remove an installed nbworkers kernel.")
    _add_target(uninstall_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prefix = sys.prefix if args.sys_prefix else args.prefix
    try:
        if args.command == "install":
            where = install(name=args.name, display_name=args.display_name, user=args.user, prefix=prefix)
            print(f"Installed the kernel {args.display_name!r} ({args.name}) in {where}")
        else:
            where = uninstall(name=args.name, user=args.user, prefix=prefix)
            print(f"Removed the kernel {args.name!r} from {where}")
    except KernelspecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
