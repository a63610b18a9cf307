"""``%%worker --help`` alone in a cell prints the usage.

IPython refuses a cell magic whose body is empty ("cell body is empty") before the magic runs, so an input
transformer gives such a cell (a ``%%worker`` first line asking for help, nothing else) a body of one empty
line; the magic then prints its usage as usual.
"""

from __future__ import annotations

import re

HELP_LINE = re.compile(r"^%%worker\b.*(?:\s|^)(?:-h|--help)(?:\s|$)")


def help_only_cell(lines: list[str]) -> list[str]:
    """An IPython cleanup transformer (list of lines in, list of lines out)."""
    if not lines or not HELP_LINE.match(lines[0].rstrip("\n")):
        return lines
    if any(line.strip() for line in lines[1:]):
        return lines
    first = lines[0] if lines[0].endswith("\n") else lines[0] + "\n"
    return [first, "pass\n"]


def install(shell) -> None:
    transformers = getattr(shell, "input_transformers_cleanup", None)
    if transformers is not None and help_only_cell not in transformers:
        transformers.append(help_only_cell)
