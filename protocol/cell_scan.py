"""What a ``%%worker`` cell uses, scanned once in the kernel and handed to the backends and the workers.

Three parts of nbworkers decide by what a cell's code mentions; they all read one ``CellScan``:

- ``names``: the identifiers of the cell's code, not its comments or strings (``magics/launch/roles.py``: which
  strategy the cell uses decides whether ``--ps`` fits and whether the workers serve);
- ``uses_tensorflow`` / ``changes_environment``: the cell, or a ``.py`` module of its directory that it
  imports (the tutorials' ``%%writefile`` files), mentions tensorflow/keras/distlib / changes its environment
  or calls ``use_tf_keras()`` (``backends/zygotes.py``: which cells may run in a forked worker; nothing
  reads ``uses_tensorflow`` since the warm pool it served was removed);
- ``multi_worker``: the cell or any ``.py`` file of its directory mentions a multi-worker strategy or distlib
  (``distlib/worker/mwms/collective_startup.py``: which workers configure collectives when their first op runs).

``scan(code, cwd)`` reads the cell and its directory once (at launch: ``launch.build_spec``, or the first
time a cluster asks, ``of_spec``). The workers get the result in ``NBWORKERS_CELL_SCAN`` (``to_env`` /
``from_env``: JSON of the three flags); a worker started without it (by hand, in a test) scans its cell file
itself with the same code (``scan_file``). Standard library only: the worker side imports this module too.
"""

from __future__ import annotations

import io
import json
import os
import re
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nbworkers.protocol.wire import ENV_CELL_SCAN

MAX_MODULE_BYTES = 1_000_000  # of cell and imported-module source read for uses_tensorflow / changes_environment
MAX_DIRECTORY_BYTES = 2_000_000  # of cell and directory .py source read for multi_worker

USES_TENSORFLOW = re.compile(r"\b(tensorflow|tf_keras|keras|distlib)\b")
# What would make `import tensorflow` in the cell see another environment than a zygote's import saw.
CHANGES_ENVIRONMENT = re.compile(
    r"use_tf_keras|TF_USE_LEGACY_KERAS|environ\s*\[[^\]]*\]\s*=(?!=)|environ\.(update|setdefault|pop|clear)\b"
    r"|\bputenv\b|\bunsetenv\b|del\s+os\.environ"
)
MULTI_WORKER_MARKERS = ("MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy", "distlib")
IMPORTED = re.compile(r"^\s*(?:from\s+([A-Za-z_]\w*)[\w.]*\s+import|import\s+([A-Za-z_][\w, .]*))", re.MULTILINE)


@dataclass(frozen=True)
class CellScan:
    names: frozenset[str] = field(default_factory=frozenset)
    uses_tensorflow: bool = True
    changes_environment: bool = False
    multi_worker: bool = True

    def to_env(self) -> str:
        """The flags the workers and backends need (not ``names``), for ``NBWORKERS_CELL_SCAN``."""
        return json.dumps({"uses_tensorflow": self.uses_tensorflow, "changes_environment": self.changes_environment,
                           "multi_worker": self.multi_worker}, sort_keys=True)


def code_names(code: str) -> frozenset[str]:
    """Identifiers the code uses (not its comments or strings)."""
    names: set[str] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.NAME:
                names.add(token.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return frozenset(names)


def imported_names(code: str) -> set[str]:
    """Top-level module names ``code`` imports."""
    names: set[str] = set()
    for match in IMPORTED.finditer(code):
        if match.group(1):
            names.add(match.group(1))
        else:
            names.update(part.strip().split(".")[0].split(" as ")[0].strip() for part in match.group(2).split(","))
    return {name for name in names if name}


def local_modules(code: str, cwd: str) -> list[Path]:
    """The ``.py`` modules of ``cwd`` that ``code`` imports (the tutorials' ``%%writefile`` files)."""
    return [Path(cwd) / f"{name}.py" for name in sorted(imported_names(code)) if (Path(cwd) / f"{name}.py").is_file()]


def _read(path: Path, limit: int) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read(max(limit, 0))
    except OSError:
        return None


def _directory_py_files(cwd: str) -> list[Path]:
    try:
        return sorted(Path(cwd) / name for name in os.listdir(cwd) if name.endswith(".py"))
    except OSError:
        return []


def scan(code: str, cwd: str) -> CellScan:
    """Scan the cell's code and the ``.py`` files of its directory (each file read at most once)."""
    texts: dict[Path, str | None] = {}

    def text(path: Path, limit: int) -> str | None:
        if path not in texts:
            texts[path] = _read(path, MAX_DIRECTORY_BYTES)
        found = texts[path]
        return None if found is None else found[:max(limit, 0)]

    # uses_tensorflow / changes_environment: the cell and the local modules it imports, within one budget
    cell = code[:MAX_MODULE_BYTES]
    module_texts = [cell]
    budget = MAX_MODULE_BYTES - len(cell)
    for module in local_modules(cell, cwd):
        if budget <= 0:
            break
        found = text(module, budget)
        if found is not None:
            module_texts.append(found)
            budget -= len(found)
    # multi_worker: the cell and every .py file of its directory, within a larger budget
    multi_worker = any(marker in code[:MAX_DIRECTORY_BYTES] for marker in MULTI_WORKER_MARKERS)
    budget = MAX_DIRECTORY_BYTES - len(code)
    for path in _directory_py_files(cwd):
        if multi_worker or budget <= 0:
            break
        found = text(path, budget)
        if found is None:
            continue
        multi_worker = any(marker in found for marker in MULTI_WORKER_MARKERS)
        budget -= len(found)
    return CellScan(
        names=code_names(code),
        uses_tensorflow=any(USES_TENSORFLOW.search(t) for t in module_texts),
        changes_environment=any(CHANGES_ENVIRONMENT.search(t) for t in module_texts),
        multi_worker=multi_worker,
    )


def scan_file(code_path: str, cwd: str) -> CellScan | None:
    """``scan`` of the cell file at ``code_path``; None when it cannot be read."""
    code = _read(Path(code_path), MAX_DIRECTORY_BYTES) if code_path else None
    return None if code is None else scan(code, cwd)


def from_env(environ: Mapping[str, str] | None = None) -> CellScan | None:
    """The scan the kernel handed over in ``NBWORKERS_CELL_SCAN``; None when absent or unreadable."""
    env = os.environ if environ is None else environ
    try:
        flags = json.loads(env.get(ENV_CELL_SCAN) or "null")
    except ValueError:
        return None
    if not isinstance(flags, dict):
        return None
    return CellScan(uses_tensorflow=bool(flags.get("uses_tensorflow", True)),
                    changes_environment=bool(flags.get("changes_environment", False)),
                    multi_worker=bool(flags.get("multi_worker", True)))


def of_spec(spec) -> CellScan:
    """The launch's scan (``LaunchSpec.scan``), made once when the spec came without one."""
    if getattr(spec, "scan", None) is None:
        spec.scan = scan(spec.code, spec.cwd or os.getcwd())
    return spec.scan
