"""The seams the layers' contracts cannot see (AST checks, run by tools/lint.py as ``seams``).

- **A participant gets a port, not the loop** (magics/run/port.py): nothing outside the loop (magics/run/loop.py,
  its handle cluster.py, the core in magics/run/core/, the detached supervisor in run/detach/) assigns an attribute
  of a run loop or of a core (``x.loop.dirty = ...``, ``cluster._loop.detached = ...``, ``core.resize_note = ...``,
  ``self._part.core.saved = ...``, or the same through ``setattr``). What a loop or a core holds changes inside the
  loop, through events; a participant posts them (``RunPort.post``). An object's own fields (``self.core = ...``)
  are its own.

    .venv/bin/python tools/seams.py     # prints each finding as path:line: text; exit 1 if any
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("extension", "protocol", "procs", "host", "magics", "distlib", "kernelspec")
RUN = ROOT / "magics" / "run"
# the loop, the run's core, the handle over them (cluster.py) and the detached supervisor that makes a loop and sets it
# up before it starts (detach/) move their own state; the rest of magics/run/ (capacity.py's looks, messages.py, ...)
# hands the loop events as everything else does
INSIDE_THE_LOOP = (RUN / "loop.py", RUN / "cluster.py", RUN / "core", RUN / "detach")
GUARDED = frozenset({"loop", "_loop", "core", "_core"})  # the names a run loop or a core goes by


def _chain(node: ast.expr) -> list[str]:
    """``a.b.c`` as ["a", "b", "c"]; other expressions as far as they are names (``f().x``: ["x"])."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    return names[::-1]


def _reaches_in(target: ast.expr) -> bool:
    """An attribute assigned on an object that is a loop or a core (its owner's own field ``self.core`` is not)."""
    return isinstance(target, ast.Attribute) and any(name in GUARDED for name in _chain(target.value))


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        yield node.target
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
        if node.args:
            yield ast.Attribute(value=node.args[0], attr="?", ctx=ast.Store())
    elif isinstance(node, ast.Delete):
        yield from node.targets


def findings(paths: list[Path] | None = None) -> list[str]:
    found = []
    files = paths if paths is not None else [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]
    for path in files:
        if any(path.is_relative_to(inside) for inside in INSIDE_THE_LOOP) or "__pycache__" in path.parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            for target in _targets(node):
                if _reaches_in(target):
                    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                    found.append(f"{where}:{node.lineno}: assigns {ast.unparse(target)} outside the loop: post an"
                                 " event through the run's port instead (magics/run/port.py)")
    return found


def main() -> int:
    report = findings()
    for line in report:
        print(line)
    print(f"loop and core fields assigned outside the loop: {len(report)}")
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
