"""The kernel imports Ray without jsonschema's IRI grammar (magics/backends/ray/quick_import.py): within the block
rfc3987_syntax does not import when jsonschema is not imported yet, and afterwards it imports as before; nothing
changes when jsonschema was imported first."""

from __future__ import annotations

import sys
import types

import pytest

from nbworkers.magics.backends.ray.quick_import import IRI_GRAMMAR_MODULE, without_iri_grammar


def test_the_iri_grammar_is_hidden_while_ray_imports_then_left_as_it_was(monkeypatch):
    monkeypatch.delitem(sys.modules, "jsonschema", raising=False)
    monkeypatch.delitem(sys.modules, IRI_GRAMMAR_MODULE, raising=False)
    with without_iri_grammar():
        with pytest.raises(ImportError):
            import rfc3987_syntax  # noqa: F401
    assert IRI_GRAMMAR_MODULE not in sys.modules  # importable again (when installed)


def test_nothing_changes_when_jsonschema_was_imported_first(monkeypatch):
    monkeypatch.setitem(sys.modules, "jsonschema", types.ModuleType("jsonschema"))
    monkeypatch.delitem(sys.modules, IRI_GRAMMAR_MODULE, raising=False)
    with without_iri_grammar():
        assert IRI_GRAMMAR_MODULE not in sys.modules
