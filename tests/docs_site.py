"""Helpers for the documentation site's test (tests/integration/test_tutorials.py): the executed tutorials into the
site's notebook cache, the site's build, and its internal links.

The tutorial tests execute every tutorial anyway; ``store_executed`` puts each executed notebook into MyST-NB's
cache (``build/docs/.jupyter_cache``, the one `make docs` uses, keyed by the notebook's code), so the site built
after them in the same run renders their outputs without executing them a second time.
"""

from __future__ import annotations

import html.parser
import subprocess
import sys
import urllib.parse
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
CACHE = REPO / "build" / "docs" / ".jupyter_cache"  # docs/conf.py's nb_execution_cache_path
EXECUTING = "Executing notebook"  # what MyST-NB logs when a notebook is not in its cache


def store_executed(name: str, executed: nbformat.NotebookNode) -> None:
    """Cache the executed tutorial ``name`` for the site, as MyST-NB would after executing it itself."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    source = nbformat.read(REPO / "tutorials" / name, as_version=4)
    notebook = nbformat.from_dict(executed)
    # what the cache's key reads: the code, the kernelspec and every cell's metadata (nbclient adds its timings there)
    notebook.metadata["kernelspec"] = source.metadata.get("kernelspec", {})
    assert [c.source for c in notebook.cells] == [c.source for c in source.cells], f"{name}: not the tutorial's cells"
    for cell, original in zip(notebook.cells, source.cells):
        cell.metadata = original.metadata
    CACHE.mkdir(parents=True, exist_ok=True)
    get_cache(str(CACHE)).cache_notebook_bundle(
        CacheBundleIn(notebook, str(DOCS / "tutorials" / name), data={"source": "tests/integration/test_tutorials.py"}),
        check_validity=False, overwrite=True)


def cached(name: str) -> bool:
    """Whether the cache holds tutorial ``name`` as it is now (its code unchanged)."""
    from jupyter_cache import get_cache

    if not CACHE.exists():
        return False
    try:
        get_cache(str(CACHE)).match_cache_notebook(nbformat.read(REPO / "tutorials" / name, as_version=4))
    except KeyError:
        return False
    return True


def build(outdir: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """`make docs`' build (warnings are errors, nitpicky) into ``outdir``."""
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-b", "html", "-d", str(outdir / ".doctrees"),
         str(DOCS), str(outdir / "html")],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(found["id"] or "")
        if tag == "a" and found.get("name"):
            self.ids.add(found["name"] or "")
        for attr in ("href", "src"):
            value = found.get(attr)
            if value and (tag in ("a", "img", "script") or (tag == "link" and attr == "href")):
                self.links.append(value)


def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser


def _pages(html_dir: Path) -> list[Path]:
    """The site's pages (not the theme's templates under _static/)."""
    return [page for page in sorted(html_dir.rglob("*.html")) if page.relative_to(html_dir).parts[0] != "_static"]


def broken_links(html_dir: Path) -> list[str]:
    """Every internal link or resource of every page whose file, or anchor in it, does not exist."""
    pages: dict[Path, _Links] = {}
    broken = []
    for page in _pages(html_dir):
        pages.setdefault(page, _parse(page))
        for link in pages[page].links:
            parts = urllib.parse.urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue
            target = page if not parts.path else (page.parent / urllib.parse.unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(html_dir)}: {link} (no file)")
                continue
            if parts.fragment and target.suffix == ".html":
                pages.setdefault(target, _parse(target))
                if urllib.parse.unquote(parts.fragment) not in pages[target].ids:
                    broken.append(f"{page.relative_to(html_dir)}: {link} (no such anchor)")
    return broken


def external_links(html_dir: Path) -> list[str]:
    """Scripts, styles and images a page loads from another host (the site must work offline)."""
    found = []
    for page in _pages(html_dir):
        text = page.read_text(encoding="utf-8", errors="replace")
        for marker in ('<script src="http', "<link rel=\"stylesheet\" href=\"http", '<img src="http'):
            if marker in text:
                found.append(f"{page.relative_to(html_dir)}: {marker}")
    return found
