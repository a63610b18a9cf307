"""The site's generated pages, written from the code itself before Sphinx reads anything (``builder-inited``).

Everything under ``docs/_generated/`` (not in git) comes from here, so the reference cannot drift from the code:

- ``worker-usage.txt``, ``worker-options.md``, ``workers-usage.txt``, ``workers-options.md``: the ``%%worker`` and
  ``%workers`` parsers (``magics/notebook/magic.py``'s ``magic_arguments``), their usage text exactly as
  ``%%worker --help`` prints it and a table of every option. The hand-written tables of ``reference/worker.md`` and
  ``reference/workers.md`` are checked against the parsers: a flag the parser has and the table lacks (or the other
  way round) fails the build.
- ``settings.md``: every traitlets setting of ``WorkerSettings``, ``RaySettings`` and ``NbworkersAPI``.
- ``env-table.md``: the environment variables of ``protocol/env_settings.py`` (``tools/env_table.py``'s table).
- ``rest-routes.md``: the server extension's routes (``extension/serverext.py``'s ``handlers()``) and their methods.
- ``distlib-api.md``: one autodoc entry per name ``nbworkers.distlib`` exports (its ``_EXPORTS``).
- ``startup.png``: the start-up figures of ``benchmarks/results.md`` as a plot (when the file is there).
- ``docs/tutorials/*.ipynb``: copies of ``tutorials/*.ipynb`` (committed without outputs), which MyST-NB renders
  with their outputs (``nb_execution_mode = "cache"``: see docs/conf.py).

``python docs/_ext/nbworkers_docs.py OUTDIR`` writes the generated files into OUTDIR (the tests use it).
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent
ROOT = DOCS.parent
GENERATED = DOCS / "_generated"
TUTORIAL_PAGES = DOCS / "tutorials"


class DocsError(Exception):
    """The code and the hand-written reference disagree: the build fails, saying where."""


# ------------------------------------------------------------------------------------------------ the magics
def _parsers():
    from nbworkers.magics.notebook.magic import WorkerMagics

    return {"%%worker": WorkerMagics.worker.parser, "%workers": WorkerMagics.workers.parser}


def usage_text(prog: str) -> str:
    """What ``%%worker --help`` (``%workers --help``) prints: the magic's own usage function on its parser."""
    from nbworkers.magics.notebook import magic

    method = {"%%worker": magic.WorkerMagics.worker, "%workers": magic.WorkerMagics.workers}[prog]
    return magic._usage(method, prog)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text else f"`` {text} ``"


def option_rows(prog: str) -> list[dict[str, str]]:
    """One row per argument of the parser: its spellings (with metavar or choices), default and help."""
    rows = []
    for action in _parsers()[prog]._actions:
        if action.dest == "help":
            continue
        if action.option_strings:
            if action.nargs == 0:
                value = ""
            elif action.choices:
                value = " {" + ",".join(map(str, action.choices)) + "}"
            else:
                value = " " + (action.metavar or action.dest.upper())
            spellings = [f"{option}{value}" for option in action.option_strings]
        else:
            spellings = [action.metavar or action.dest]
        default = action.default
        if action.nargs == 0 or default in (None, "", []):
            shown = "—"
        else:
            shown = _code(repr(default) if isinstance(default, str) else str(default))
        rows.append({"flags": ", ".join(_code(s) for s in spellings), "options": " ".join(action.option_strings),
                     "default": shown, "help": _cell((action.help or "").replace("%%", "%"))})
    return rows


def options_table(prog: str) -> str:
    lines = ["| option | parser default | help (as `--help` prints it) |", "| --- | --- | --- |"]
    lines += [f"| {row['flags']} | {row['default']} | {row['help']} |" for row in option_rows(prog)]
    return "\n".join(lines) + "\n"


def check_hand_table(prog: str, page: Path) -> None:
    """The hand-written table of ``page`` names every option of the parser, and no other."""
    text = page.read_text(encoding="utf-8")
    named = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            named.update(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", first))
    actions = [action for action in _parsers()[prog]._actions if action.option_strings and action.dest != "help"]
    parser_options = {option for action in actions for option in action.option_strings}
    # an option is documented when one of its spellings is (`-w I` for `-w/--worker`)
    missing = {action.option_strings[-1] for action in actions if not named & set(action.option_strings)}
    unknown = named - parser_options - {"--help", "-h"}
    if missing or unknown:
        where = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
        raise DocsError(f"{where}: the table of {prog}'s flags does not match its parser "
                        f"(magics/notebook/magic.py): missing {sorted(missing)}, not in the parser {sorted(unknown)}")


# ------------------------------------------------------------------------------------------------ settings
def _default_text(cls, name: str, trait) -> str:
    generators = getattr(cls, "_trait_default_generators", {})
    if name in generators or hasattr(cls, f"_{name}_default"):
        return "computed (see its help)"
    value = trait.default_value
    if isinstance(value, float) and value.is_integer():
        value = value
    return _code(repr(value))


def settings_tables() -> str:
    from nbworkers.magics.backends.ray.ray_settings import RaySettings
    from nbworkers.magics.settings import WorkerSettings
    from nbworkers.serverext import NbworkersAPI

    parts = []
    for cls, where in ((WorkerSettings, "the kernel side: `nbworkers.settings().NAME = VALUE`, or "
                        "`c.WorkerSettings.NAME` in the IPython config"),
                       (RaySettings, "the Ray backend (`--backend ray`): `c.RaySettings.NAME` in the IPython config"),
                       (NbworkersAPI, "the REST API, in the Jupyter server: `c.NbworkersAPI.NAME` in "
                        "`jupyter_server_config.py`")):
        parts.append(f"### `{cls.__name__}`\n\n{where} ({_code(cls.__module__)}).\n")
        parts.append("| setting | type | default | what it is |\n| --- | --- | --- | --- |")
        for name, trait in sorted(cls.class_traits(config=True).items()):
            parts.append(f"| `{name}` | {type(trait).__name__} | {_default_text(cls, name, trait)} | "
                         f"{_cell(trait.help)} |")
        parts.append("")
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------ environment
def env_table() -> str:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import env_table as table
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return table.render() + "\n"


# ------------------------------------------------------------------------------------------------ REST API
def rest_routes() -> str:
    from nbworkers.serverext import API_PREFIX, handlers

    lines = ["| route (a regular expression, after the server's base URL) | methods | handler | what it does |",
             "| --- | --- | --- | --- |"]
    for pattern, handler, _ in handlers("/", None, None):
        methods = [m.upper() for m in ("get", "post", "put", "patch", "delete")
                   if any(m in vars(k) for k in handler.__mro__ if k.__module__.startswith("nbworkers"))]
        doc = inspect.getdoc(handler) or ""
        first = doc.split("\n\n")[0]
        lines.append(f"| {_code(pattern.lstrip('/'))} | {', '.join(methods)} | `{handler.__name__}` | {_cell(first)} |")
    return f"Under `{API_PREFIX}` (and the TensorBoard route):\n\n" + "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ distlib
def distlib_api() -> str:
    import nbworkers.distlib as distlib

    by_module: dict[str, list[str]] = {}
    for name, module in distlib._EXPORTS.items():
        by_module.setdefault(module, []).append(name)
    out = []
    for module, names in by_module.items():
        out.append(f"### `nbworkers.distlib.{module}`\n\n```{{eval-rst}}")
        for name in names:
            obj = getattr(distlib, name)
            if inspect.isclass(obj):
                kind = "autoexception" if issubclass(obj, BaseException) else "autoclass"
                out.append(f".. {kind}:: nbworkers.distlib.{name}\n   :members:\n")
            elif callable(obj):
                out.append(f".. autofunction:: nbworkers.distlib.{name}\n")
            else:
                out.append(f".. autodata:: nbworkers.distlib.{name}\n   :no-value:\n")
        out.append("```\n")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ benchmarks
STARTUP_ROW = re.compile(r"^\| zygote: first step, (\d) workers: ([^|]+?)\s*\| ([\d.]+) s\s*\|", re.M)


def startup_plot(target: Path) -> bool:
    """A bar chart of benchmarks/results.md's start-up rows (seconds to the first step); False without the file."""
    results = ROOT / "benchmarks" / "results.md"
    if not results.exists():
        return False
    rows = STARTUP_ROW.findall(results.read_text(encoding="utf-8"))
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [label.replace(" (one import, forks)", "").replace(", zygote prewarmed at %load_ext", " (prewarmed)")
              for _, label, _ in rows]
    kinds = list(dict.fromkeys(labels))
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=100)
    width = 0.8 / 2
    for offset, workers in enumerate(sorted({w for w, _, _ in rows})):
        values = {label: float(sec) for (w, _, sec), label in zip(rows, labels) if w == workers}
        xs = [i + (offset - 0.5) * width for i in range(len(kinds))]
        bars = ax.bar(xs, [values.get(k, 0) for k in kinds], width, label=f"{workers} workers")
        ax.bar_label(bars, fmt="%.2f s", fontsize=8)
    ax.set_xticks(range(len(kinds)), kinds, fontsize=8)
    ax.set_ylabel("seconds to the first training step")
    ax.set_title("Start-up: the tutorial's hand launch and %%worker (benchmarks/results.md)", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(target)
    plt.close(fig)
    return True


# ------------------------------------------------------------------------------------------------ writing
def _write(path: Path, text: str | bytes) -> None:
    """Write only when the content changed (Sphinx rebuilds what changed)."""
    old = path.read_bytes() if path.exists() else None
    data = text.encode("utf-8") if isinstance(text, str) else text
    if old != data:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def generate(outdir: Path = GENERATED, check_pages: bool = True) -> list[str]:
    """Write every generated file into ``outdir``; return their names."""
    outdir.mkdir(parents=True, exist_ok=True)
    if check_pages:
        check_hand_table("%%worker", DOCS / "reference" / "worker.md")
        check_hand_table("%workers", DOCS / "reference" / "workers.md")
    files = {
        "worker-usage.txt": usage_text("%%worker"),
        "worker-options.md": options_table("%%worker"),
        "workers-usage.txt": usage_text("%workers"),
        "workers-options.md": options_table("%workers"),
        "settings.md": settings_tables(),
        "env-table.md": env_table(),
        "rest-routes.md": rest_routes(),
        "distlib-api.md": distlib_api(),
    }
    for name, text in files.items():
        _write(outdir / name, text)
    plot = outdir / "startup.png"
    tmp = outdir / "startup.new.png"
    if startup_plot(tmp):
        _write(plot, tmp.read_bytes())
        tmp.unlink()
        files["startup.png"] = ""
    else:
        _write(outdir / "startup-missing.md", "No `benchmarks/results.md` here: run `make bench` for the plot.\n")
    return sorted(files)


def copy_tutorials(target: Path = TUTORIAL_PAGES) -> list[str]:
    """``tutorials/*.ipynb`` into the site's source (``docs/tutorials/``, not in git); stale copies removed."""
    target.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in (ROOT / "tutorials").glob("*.ipynb"))
    for name in names:
        _write(target / name, (ROOT / "tutorials" / name).read_bytes())
    for stale in target.glob("*.ipynb"):
        if stale.name not in names:
            stale.unlink()
    return names


def _on_builder_inited(app) -> None:
    try:
        generate()
    except DocsError as error:
        from sphinx.errors import ExtensionError

        raise ExtensionError(str(error)) from None
    copy_tutorials()


LIVE_ONLY = 'src="/nbworkers/'  # an output that shows a route of the Jupyter server (`%workers tensorboard`'s frame)


def _on_doctree_resolved(app, doctree, docname) -> None:
    """A static page has no Jupyter server behind it: an output framing one of its routes says so instead."""
    from docutils import nodes

    for node in list(doctree.findall(nodes.raw)):
        if node.get("format") == "html" and LIVE_ONLY in node.astext():
            node.replace_self(nodes.paragraph(text="(In the notebook, TensorBoard shows here, served through the "
                                                   "Jupyter server; this static page has no server behind it.)"))


def setup(app):
    app.connect("builder-inited", _on_builder_inited)
    app.connect("doctree-resolved", _on_doctree_resolved)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the site's generated reference files into OUTDIR.")
    parser.add_argument("outdir", type=Path)
    args = parser.parse_args(argv)
    for name in generate(args.outdir):
        print(args.outdir / name)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
