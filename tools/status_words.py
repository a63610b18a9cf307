"""The status words are written as strings only where they are defined: protocol/ and the bodies of enums. Anywhere
else a status is the enum's member (``WorkerStatus.FAILED``, ``CellState.LOST``), so a new status, or a renamed one,
is one change in protocol/statuses.py that every user follows (tools/lint.py runs this; so does
tests/unit/test_vocabulary.py on a sample).

A status word is a value of ``ClusterStatus``, ``WorkerStatus``, ``ViewStatus`` or ``CellState``. Not a finding:
a docstring; a field's name (a dict literal's key, a subscript, the key of ``.get``/``.pop``/``.setdefault``, the
attribute of ``getattr``/``hasattr``), which only shares its spelling with a status (the state's ``detached`` flag,
a session summary's ``queued`` count); and the few honest exceptions below, each with its reason. (``CellEnd``'s
values, ``ok``/``error``/``interrupted``, are too common as words to check this way.)
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from nbworkers.protocol.statuses import CellState, ClusterStatus, ViewStatus, WorkerStatus

WORDS = frozenset(s.value for enum in (ClusterStatus, WorkerStatus, ViewStatus, CellState) for s in enum)
CHECKED = ("extension", "procs", "host", "magics", "distlib", "kernelspec")  # the package without protocol/
# (file, word): why the string there is not a status
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("magics/views/widget.py", "detached"): "SNAPSHOT_FIELDS names the snapshot's `detached` flag (a field)",
    ("magics/notebook/earlier_runs.py", "detached"): "a run's kind (its state's `detached` flag), not its status",
    ("distlib/worker/preemption.py", "stopped"): "a log line's first word (`stopped: saving a checkpoint ...`)",
    ("distlib/worker/session.py", "stopped"): "a Stop's error text in the cell (`stopped`, as a sentence)",
}
KEY_METHODS = frozenset({"get", "pop", "setdefault"})
ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "hasattr", "setattr"})


def _enum_class(node: ast.ClassDef) -> bool:
    """A class whose base is an enum (``Enum``, ``str, Enum``, or one of nbworkers' ``Status`` enums)."""
    names = {base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
             for base in node.bases}
    return bool(names & {"Enum", "StrEnum", "IntEnum", "Status"}) or any(n.endswith("Status") for n in names)


def _not_words(tree: ast.AST) -> set[int]:
    """ids of the constants that are no finding: in an enum's body, a docstring, or a field's name."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and _enum_class(node):
            skip.update(id(sub) for sub in ast.walk(node))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.Dict):
            skip.update(id(key) for key in node.keys if key is not None)
        elif isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in KEY_METHODS:
                skip.add(id(node.args[0]))
            elif isinstance(func, ast.Name) and func.id in ATTRIBUTE_FUNCTIONS and len(node.args) > 1:
                skip.add(id(node.args[1]))
    return skip


def findings_in(source: str) -> list[tuple[int, str]]:
    """(line, word) of every status word written as a string in ``source`` (exceptions not applied)."""
    tree = ast.parse(source)
    skip = _not_words(tree)
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in WORDS
                  and id(node) not in skip)


def findings(root: Path, folders: Iterable[str] = CHECKED) -> list[str]:
    """``path:line: 'word'`` for every status word written as a string outside protocol/ and enum definitions."""
    found, excused = [], set()
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            for line, word in findings_in(path.read_text(encoding="utf-8")):
                if (name, word) in EXCEPTIONS:
                    excused.add((name, word))
                else:
                    found.append(f"{name}:{line}: {word!r} (use the enum's member: protocol/statuses.py)")
    if set(folders) == set(CHECKED):  # an exception nothing needs any more goes
        found += [f"tools/status_words.py: EXCEPTIONS[{key!r}] excuses nothing now: remove it"
                  for key in EXCEPTIONS if key not in excused]
    return found


def main() -> int:
    found = findings(Path(__file__).resolve().parent.parent)
    print("\n".join(found) or f"no status word written as a string outside protocol/ and enums ({len(WORDS)} words)")
    return 1 if found else 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
