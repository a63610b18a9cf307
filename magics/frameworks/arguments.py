"""The ``%%worker`` arguments the registered frameworks declare: ``--framework`` and each framework's flags.

``@framework_arguments()`` sits among a magic's ``@argument`` decorators: it adds ``--framework`` (its choices are
the registered names, read at each parse; ``tf`` the default) and one argument group per framework with flags,
titled ``--framework NAME`` (``%%worker --help`` lists them there). At launch, ``chosen(args)`` is the framework a
cell asked for and its options (each flag's ``dest``: its value); a flag of another framework, or a role the
framework has not (``--chief``, ``--ps``, ``--evaluator`` are TensorFlow's), is refused with what to do.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import Any

from IPython.core.magic_arguments import ArgDecorator

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.frameworks import Framework, registry
from nbworkers.magics.plugins import Flag

ROLE_FLAGS = (("chief", "--chief"), ("evaluator", "--evaluator"), ("ps", "--ps"))


class FrameworkNames:
    """``--framework``'s choices: the registered names, as they are when the line is parsed."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in registry.frameworks()

    def __iter__(self) -> Iterator[str]:
        return iter(list(registry.frameworks()))

    def __len__(self) -> int:
        return len(registry.frameworks())


class framework_arguments(ArgDecorator):  # noqa: N801 (a decorator, spelled as IPython's ``argument``)
    """``--framework`` and every registered framework's flags, as a magic's ``@argument`` adds one."""

    def add_to_parser(self, parser: argparse.ArgumentParser, group: Any) -> None:
        summaries = "; ".join(f"{f.name}: {f.summary}" for f in registry.frameworks().values())
        (group or parser).add_argument("--framework", type=str.lower, choices=FrameworkNames(),
                                       default=registry.DEFAULT, help=f"what the workers train with: {summaries}")
        for framework in registry.frameworks().values():
            flags = [flag for flag in framework.flags if flag.option not in parser._option_string_actions]
            if flags:
                flag_group = parser.add_argument_group(f"--framework {framework.name}")
                for flag in flags:
                    flag_group.add_argument(flag.option, **dict(flag.kwargs))
        return None


def chosen(args: argparse.Namespace) -> tuple[Framework, dict[str, Any]]:
    """(the framework ``args`` asked for, its options): another framework's flags and roles it has not refused.
    A ``LaunchError`` says what to do; nothing has started."""
    try:
        framework = registry.get(getattr(args, "framework", None) or registry.DEFAULT)
    except LookupError as error:
        raise LaunchError(str(error)) from None
    mine = {flag.option for flag in framework.flags}
    for other in registry.frameworks().values():
        for flag in other.flags:
            if other is not framework and flag.option not in mine and _given(args, flag):
                raise LaunchError(flag.elsewhere or f"{flag.option}: only with --framework {other.name}. "
                                  f"Add --framework {other.name}, or leave {flag.option} out.")
    roles = [option for attr, option in ROLE_FLAGS if getattr(args, attr, None) and attr not in framework.roles]
    if roles:
        raise LaunchError(f"{', '.join(roles)}: not a role of --framework {framework.name}, whose workers are "
                          f"-n equal processes. Leave {' and '.join(roles)} out, or use --framework "
                          f"{registry.DEFAULT}.")
    return framework, {flag.dest: getattr(args, flag.dest, flag.default) for flag in framework.flags}


def check_installed(framework: Framework, python: str) -> None:
    """The modules ``framework`` requires are installed for ``python`` when it is this kernel's interpreter (another
    one's: the worker says so itself). Nothing is imported here."""
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return
    missing = [name for name in framework.requires if importlib.util.find_spec(name) is None]
    if missing:
        raise LaunchError(f"--framework {framework.name}: {', '.join(missing)} is not installed for the workers' "
                          f"interpreter ({python}). Install it (pip install \"nbworkers[{framework.name}]\"), or "
                          f"leave --framework {framework.name} out.")


def _given(args: argparse.Namespace, flag: Flag) -> bool:
    return getattr(args, flag.dest, flag.default) not in (flag.default, None, "", False)
