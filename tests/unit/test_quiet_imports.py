"""A spawned worker imports its framework's modules with collections off (distlib/frameworks/quiet_imports.py):
off from the first watched import's start to the last one's end (nested ones too), frozen and on again after it,
whether it succeeded or raised; other imports untouched; wrapt's post-import hooks (compat/import_hooks.py) still
fire, whichever finder came first; the module keeps its own loader and its resources. The garbage collector's
state and ``sys.meta_path`` are the process's: the fixture puts both back (wrapt's finder stays), and each test's modules have names of
their own (wrapt keeps its hooks by name for the process's life)."""

from __future__ import annotations

import gc
import importlib.resources
import itertools
import sys
from pathlib import Path
from types import ModuleType

import pytest

from nbworkers.distlib.compat.import_hooks import when_imported
from nbworkers.distlib.frameworks import quiet_imports

_prefixes = itertools.count()


class Modules:
    """Names of this test's fake modules: ``heavy`` imports ``light`` (not watched) and ``inner``; ``broken``
    raises; ``data`` is a package with a text file."""

    def __init__(self, root: Path):
        p = f"nbw_quiet{next(_prefixes)}_"
        self.heavy, self.light, self.inner, self.broken, self.data = (p + n for n in
                                                                       ("heavy", "light", "inner", "broken", "data"))
        files = {
            f"{self.heavy}/__init__.py": f"import gc, {self.light}, {self.inner}\n"
                                         f"SEEN = [gc.isenabled(), {self.light}.SEEN, {self.inner}.SEEN]\n",
            f"{self.light}.py": "import gc\nSEEN = gc.isenabled()\n",
            f"{self.inner}.py": "import gc\nSEEN = gc.isenabled()\n",
            f"{self.broken}.py": "raise ImportError('broken on purpose')\n",
            f"{self.data}/__init__.py": "",
            f"{self.data}/table.txt": "rows\n",
        }
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)

    def load(self, name: str) -> ModuleType:
        return __import__(name)


@pytest.fixture
def modules(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    enabled = gc.isenabled()
    made = Modules(tmp_path)
    yield made
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, quiet_imports.QuietImportFinder)]  # (wrapt's
    # stays: wrapt puts its finder there once per process)
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()
    for name in [n for n in sys.modules if n.startswith("nbw_quiet")]:
        del sys.modules[name]


def test_collections_are_off_through_a_watched_import_and_its_nested_ones_then_frozen_and_on(modules):
    quiet_imports.install([modules.heavy, modules.inner])
    assert modules.load(modules.light).SEEN is True  # not watched: on
    frozen = gc.get_freeze_count()
    heavy = modules.load(modules.heavy)
    assert heavy.SEEN == [False, True, False]  # light was imported before, unwatched: its SEEN is from then
    assert gc.isenabled() and gc.get_freeze_count() > frozen
    assert type(heavy.__spec__.loader).__name__ == "SourceFileLoader" and heavy.__loader__ is heavy.__spec__.loader


def test_a_watched_import_that_raises_leaves_collections_on(modules):
    quiet_imports.install([modules.broken])
    with pytest.raises(ImportError, match="broken on purpose"):
        modules.load(modules.broken)
    assert gc.isenabled() and modules.broken not in sys.modules


@pytest.mark.parametrize("first", ["QuietImportFinder", "ImportHookFinder"])
def test_wrapt_post_import_hooks_fire_whichever_finder_comes_first_and_resources_still_load(modules, first):
    fired = []
    when_imported(modules.inner, lambda module: fired.append("inner"))  # wrapt's finder, on sys.meta_path
    quiet_imports.install([modules.heavy, modules.inner, modules.data])
    when_imported(modules.heavy, lambda module: fired.append("heavy"))
    finder = next(f for f in sys.meta_path if type(f).__name__ == first)
    sys.meta_path.remove(finder)
    sys.meta_path.insert(0, finder)
    heavy = modules.load(modules.heavy)
    assert heavy.SEEN[0] is False and heavy.SEEN[2] is False
    assert fired == ["inner", "heavy"]  # each once (inside the quiet span or right after it: the finders' order)
    modules.load(modules.data)
    assert importlib.resources.files(modules.data).joinpath("table.txt").read_text() == "rows\n"
    assert gc.isenabled()


def test_one_finder_at_most_and_none_when_everything_watched_is_imported_already(modules):
    modules.load(modules.light)
    assert quiet_imports.install([modules.light, "json"]) is None
    second = quiet_imports.install([modules.heavy])
    assert quiet_imports.install([modules.inner]) is second
    assert sum(isinstance(f, quiet_imports.QuietImportFinder) for f in sys.meta_path) == 1
