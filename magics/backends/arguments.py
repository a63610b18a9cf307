"""The ``%%worker`` arguments the registered backends declare: ``--backend`` and each backend's flags.

``@backend_arguments()`` sits among a magic's ``@argument`` decorators: it adds ``--backend`` (its choices are the
registered names, read at each parse) and one argument group per backend, titled with its name, holding its flags
(``%%worker --help`` lists them there). A backend registered later (``registry.register``) adds its group then.

At launch, ``chosen(args)`` is the backend a cell asked for, its options filled from the parsed flags and checked:
a flag of another backend is refused (the flag's own ``elsewhere`` text, or "only for the <title> backend").
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from typing import Any

from IPython.core.magic_arguments import ArgDecorator

from nbworkers.magics.backends import registry
from nbworkers.magics.backends.registry import DEFAULT, BackendKind, Flag
from nbworkers.magics.errors import LaunchError

log = logging.getLogger("nbworkers")
BACKEND_HELP = "where the workers run: "


class BackendNames:
    """``--backend``'s choices: the registered names, as they are when the line is parsed."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in registry.kinds()

    def __iter__(self) -> Iterator[str]:
        return iter(list(registry.kinds()))

    def __len__(self) -> int:
        return len(registry.kinds())


class backend_arguments(ArgDecorator):  # noqa: N801 (a decorator, spelled as IPython's ``argument``)
    """``--backend`` and every registered backend's flags, as a magic's ``@argument`` adds one."""

    def add_to_parser(self, parser: argparse.ArgumentParser, group: Any) -> None:
        action = (group or parser).add_argument("--backend", type=str.lower, choices=BackendNames(), default=DEFAULT,
                                                help=_backend_help())
        for kind in registry.kinds().values():
            _add_flags(parser, kind)

        def added(kind: BackendKind[Any]) -> None:
            action.help = _backend_help()
            _add_flags(parser, kind)

        registry.on_register(added)
        return None


def _backend_help() -> str:
    summaries = [kind.summary for kind in registry.kinds().values()]
    return BACKEND_HELP + (" or ".join([", ".join(summaries[:-1]), summaries[-1]]) if len(summaries) > 1
                           else "".join(summaries))


def _add_flags(parser: argparse.ArgumentParser, kind: BackendKind[Any]) -> None:
    """``kind``'s flags in a group titled with its name (a flag the parser has already, as another backend's, is
    shared: each backend that declares it reads it)."""
    flags = [flag for flag in kind.flags if flag.option not in parser._option_string_actions]
    if not flags:
        return
    group = parser.add_argument_group(f"--backend {kind.name}")
    for flag in flags:
        try:
            group.add_argument(flag.option, **dict(flag.kwargs))
        except (argparse.ArgumentError, TypeError, ValueError) as error:
            log.warning("nbworkers: backend %r: its flag %s could not be added: %s", kind.name, flag.option, error)


def chosen(args: argparse.Namespace) -> tuple[BackendKind[Any], Any]:
    """(the backend ``args`` asked for, its options): another backend's flags refused, its own checks passed.
    A ``LaunchError`` says what to do; nothing has started."""
    try:
        kind = registry.get(getattr(args, "backend", None) or DEFAULT)
    except LookupError as error:
        raise LaunchError(str(error)) from None
    refuse_foreign(args, kind)
    options = options_from(args, kind)
    kind.check(options)
    return kind, options


def options_from(args: argparse.Namespace, kind: BackendKind[Any]) -> Any:
    """``kind``'s options dataclass, each field its flag's value (its default when the flag was not given)."""
    return kind.options(**{flag.dest: getattr(args, flag.dest, flag.default) for flag in kind.flags})


def refuse_foreign(args: argparse.Namespace, kind: BackendKind[Any]) -> None:
    """A flag of another backend given with ``kind``: its own ``elsewhere`` text, else the flags of the first such
    backend and which ``--backend`` takes them."""
    mine = {flag.option for flag in kind.flags}
    foreign: dict[str, tuple[BackendKind[Any], list[Flag]]] = {}
    for other in registry.kinds().values():
        for flag in other.flags:
            if other is kind or flag.option in mine or not _given(args, flag):
                continue
            if flag.elsewhere:
                raise LaunchError(flag.elsewhere)
            foreign.setdefault(other.name, (other, []))[1].append(flag)
    for other, flags in foreign.values():
        raise LaunchError(f"{', '.join(f.option for f in flags)}: only for the {other.title} backend. "
                          f"Add --backend {other.name}.")


def _given(args: argparse.Namespace, flag: Flag) -> bool:
    return getattr(args, flag.dest, flag.default) not in (flag.default, None, "", False)
