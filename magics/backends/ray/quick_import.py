"""``import ray`` in the kernel without jsonschema's IRI grammar, the larger part of that import's cost.

Ray imports jsonschema (``ray.runtime_env``'s plugin schemas), and jsonschema, when ``rfc3987-syntax`` is installed
(Jupyter brings it: ``jsonschema[format-nongpl]``), builds its ``iri`` format checkers at import: some 35 Earley
parsers. Measured here: ``import ray`` took 2.9 s of CPU, 0.85 s without them (jsonschema issue 1428, "Lazy import
rfc3987_syntax"; the maintained fork ``rfc3987-syntax2`` loads lazily: jsonschema pull request 1521). The kernel's
import is the first step of a first ``--backend ray`` cell, before anything starts on the nodes.

So the kernel imports Ray with ``rfc3987_syntax`` hidden when jsonschema is not imported yet: jsonschema then leaves
the ``iri`` and ``iri-reference`` format checks out in this kernel, as when ``rfc3987-syntax`` is not installed
(formats are only checked when a format checker is asked for; Jupyter's schemas use neither). Nothing changes when
jsonschema was imported before (its checkers are made), nor in the Ray nodes' processes (docs/ray.md: "What a first
cell costs").
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

IRI_GRAMMAR_MODULE = "rfc3987_syntax"


@contextmanager
def without_iri_grammar() -> Iterator[None]:
    """Within: ``import rfc3987_syntax`` raises ImportError, if jsonschema is not imported yet (jsonschema catches
    it and leaves those checkers out); afterwards it imports as before."""
    if "jsonschema" in sys.modules or IRI_GRAMMAR_MODULE in sys.modules:
        yield
        return
    sys.modules[IRI_GRAMMAR_MODULE] = None  # type: ignore[assignment]  # the import system's "not importable"
    try:
        yield
    finally:
        if IRI_GRAMMAR_MODULE in sys.modules and sys.modules[IRI_GRAMMAR_MODULE] is None:
            del sys.modules[IRI_GRAMMAR_MODULE]
