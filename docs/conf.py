"""Sphinx configuration of the nbworkers site (`make docs`: build/docs/html/).

MyST markdown, MyST-NB for the tutorials, the PyData theme; the reference is generated from the code by
docs/_ext/nbworkers_docs.py before anything is read (docs/_generated/, not in git).

Tutorial outputs: the tutorials are committed without outputs; MyST-NB renders them with outputs taken from its
jupyter-cache (build/docs/.jupyter_cache), keyed by the notebook's code. A notebook the cache does not hold (a fresh
clone, or a tutorial whose code changed) is executed here, once, with real TensorFlow workers on mock data
(NBWORKERS_MOCK_DATA=1), and cached. The test suite fills the same cache with the notebooks its tutorial tests
executed anyway (tests/integration/test_tutorials.py), so the suite's site build executes nothing a second time.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
BUILD = ROOT / "build" / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

project = "nbworkers"
author = "the nbworkers developers"
copyright = "2026, the nbworkers developers"
try:
    from importlib.metadata import version as _version

    release = _version("nbworkers")
except Exception:  # noqa: BLE001 - a checkout not installed: the version is pyproject.toml's
    release = ""
version = release

extensions = [
    "myst_nb",  # MyST markdown and notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "nbworkers_docs",  # docs/_ext: the generated reference
]

exclude_patterns = ["_build", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store", "_generated/*.md"]
# The generated .md are included by the reference pages, not pages of their own.

nitpicky = True  # every internal reference must resolve
nitpick_ignore_regex = [
    # other libraries' types in signatures and fields (no intersphinx: the build is offline)
    (r"py:class", r"(tensorflow|tf|keras|numpy|np|traitlets|threading|pathlib|collections|typing|types)\..*"),
    (r"py:class", r".*[\[\]].*"),  # generic types in dataclass fields' annotations (dict[str, ...])
]

myst_enable_extensions = ["colon_fence", "deflist", "attrs_inline"]
myst_heading_anchors = 4  # `page.md#a-heading` links, GitHub's slugs

# --- tutorials (MyST-NB)
nb_execution_mode = os.environ.get("NBWORKERS_DOCS_EXECUTION", "cache")
nb_execution_cache_path = str(BUILD / ".jupyter_cache")
nb_execution_timeout = 900  # seconds per cell: a blocking wait for a training run, on 2 shared cores
nb_execution_raise_on_error = True  # a tutorial that fails fails the build
nb_execution_in_temp = True  # the notebooks write files (mnist_setup.py, checkpoints): not into docs/
nb_execution_show_tb = True
# The widget's live view needs a kernel; the page shows the text/HTML view and the final summary beside it.
nb_mime_priority_overrides = [("*", "application/vnd.jupyter.widget-view+json", None)]
nb_ipywidgets_js = {}  # no widget manager from a CDN (the site works offline)
nb_merge_streams = True

if nb_execution_mode != "off":  # what the kernels of an execution get (they inherit this process's environment)
    os.environ["NBWORKERS_MOCK_DATA"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    os.environ.setdefault("NBWORKERS_RUN_ROOT", str(BUILD / "runs"))
    Path(os.environ["NBWORKERS_RUN_ROOT"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    tf215 = ROOT / ".venv-tf215" / "bin" / "python"
    os.environ.setdefault("NBWORKERS_TF215_PYTHON", str(tf215) if tf215.exists() else "")
    os.environ.pop("TF_CONFIG", None)

# --- API reference (autodoc)
autodoc_typehints = "none"  # the signatures name private types; the docstrings say what they take
autodoc_member_order = "bysource"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# --- HTML
html_theme = "pydata_sphinx_theme"
html_title = "nbworkers"
html_static_path = ["_static"]
html_css_files = ["nbworkers.css"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "navbar_align": "left",
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_sidebars = {"index": [], "changelog": []}
html_last_updated_fmt = None
