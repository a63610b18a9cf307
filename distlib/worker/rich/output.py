"""Rich output of a session worker: ``display(...)``, ``plt.show()`` and a cell's last expression, sent to the
kernel as MIME bundles (``protocol/mime.py``) on the relay (kind ``display``): data, never pickled.

- ``display``: IPython's ``display``/``publish_display_data`` print a repr when no IPython shell runs (a worker
  has none). Once the user's code imports ``IPython.core.display_functions`` (``from IPython.display import
  display`` does), they are replaced by ``display`` here, which makes the bundle from the object's
  ``_repr_mimebundle_`` / ``_repr_png_`` / ``_repr_html_`` ... methods (as IPython's formatter does, without its
  shell) and sends it. IPython is never imported here: a worker without it works as before.
- matplotlib: the worker's backend is ``module://nbworkers.distlib.worker.rich.mpl_backend`` (Agg), whose ``show()``
  sends every open figure as PNG and closes it; figures still open when the cell ends are sent then (as
  ipykernel's inline backend does).
- The last expression: its bundle goes with source ``result``; the kernel shows it as the cell's ``Out``.

By default only worker 0 sends ``display`` outputs (every worker runs the same code: N copies of one plot);
``%%worker --display all`` sends them from every worker. Every worker sends its ``result`` (the kernel shows
worker 0's, and the others' where they differ; the other workers send only its ``text/plain``, unless ``all``).
A bundle over the cell's size limit is not sent: one line on stderr says so.
"""

from __future__ import annotations

import io
import sys
from typing import Any, Callable

from nbworkers.protocol import mime

REPR_METHODS = (  # IPython's formatter's order
    ("_repr_png_", "image/png"), ("_repr_jpeg_", "image/jpeg"), ("_repr_svg_", "image/svg+xml"),
    ("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown"), ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
)
MPL_BACKEND = "module://nbworkers.distlib.worker.rich.mpl_backend"

Send = Callable[..., Any]


def bundle_of(obj: Any, include: Any = None, exclude: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(data, metadata) of ``obj``: its rich forms nbworkers shows, plus ``text/plain`` (its repr)."""
    data: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    method = getattr(obj, "_repr_mimebundle_", None)
    if callable(method) and not isinstance(obj, type):
        try:
            made = method(include=include, exclude=exclude)
        except TypeError:
            made = method()
        if isinstance(made, tuple) and len(made) == 2:
            made, meta = made
            metadata.update(meta if isinstance(meta, dict) else {})
        if isinstance(made, dict):
            data.update({k: mime.encode_value(k, v) for k, v in made.items() if k in mime.MIME_TYPES})
    for name, kind in REPR_METHODS:
        if kind in data or isinstance(obj, type):
            continue
        method = getattr(obj, name, None)
        if not callable(method):
            continue
        try:
            value = method()
        except Exception:
            continue
        if isinstance(value, tuple) and len(value) == 2:
            value, meta = value
            if isinstance(meta, dict):
                metadata[kind] = meta
        if value is not None:
            data[kind] = mime.encode_value(kind, value)
    if "text/plain" not in data:
        data["text/plain"] = repr(obj)
    return data, metadata


class RichOutput:
    """What one session worker sends of the running cell's rich output (``begin`` each cell)."""

    def __init__(self, send: Send, index: int):
        self.send = send
        self.index = index
        self.cell = 0
        self.everyone = False
        self.max_bytes = 4 * 2**20
        self.dropped = 0

    def begin(self, cell: int, display: str, max_bytes: int) -> None:
        self.cell, self.everyone, self.max_bytes = cell, display == "all", max_bytes

    def publish(self, data: dict[str, Any], metadata: dict[str, Any] | None, source: str = "display") -> None:
        if not (self.index == 0 or self.everyone):
            if source == "display":
                return
            data, metadata = {"text/plain": str(data.get("text/plain", ""))}, {}  # compared with worker 0's only
        try:
            mime.check_bundle(data, metadata, self.max_bytes)
        except mime.BundleError as error:
            self.dropped += 1
            print(f"nbworkers: output not shown in the notebook ({error})", file=sys.stderr, flush=True)
            return
        self.send("display", cell=self.cell, source=source, data=data, metadata=metadata or {})

    def show(self, obj: Any, source: str = "display", include: Any = None, exclude: Any = None) -> None:
        try:
            data, metadata = bundle_of(obj, include, exclude)
        except Exception as error:  # a broken _repr_*_: the text form at least
            data, metadata = {"text/plain": f"<{type(obj).__name__}: its display failed: {error!r}>"}, {}
        self.publish(data, metadata, source)

    # ------------------------------------------------------------------------------ IPython's display
    def display(self, *objs: Any, include: Any = None, exclude: Any = None, metadata: Any = None,
                transient: Any = None, display_id: Any = None, raw: bool = False, clear: bool = False,
                **kwargs: Any) -> None:
        """``IPython.display.display`` in a session worker: each object's bundle to the notebook."""
        for obj in objs:
            if raw and isinstance(obj, dict):
                self.publish(obj, metadata if isinstance(metadata, dict) else None)
            else:
                self.show(obj, include=include, exclude=exclude)

    def publish_display_data(self, data: dict[str, Any], metadata: dict[str, Any] | None = None,
                             *args: Any, **kwargs: Any) -> None:
        self.publish(data, metadata)

    def patch_ipython(self, module: Any) -> None:
        """Post-import hook of ``IPython.core.display_functions``: its display functions become this one's (and
        those of the modules that re-export them, when they were imported before: their names are bound)."""
        owners: list[Any] = [module, sys.modules.get("IPython.core.display"), sys.modules.get("IPython.display")]
        for owner in owners:
            if owner is not None:
                owner.display = self.display
                owner.publish_display_data = self.publish_display_data

    # ------------------------------------------------------------------------------ matplotlib
    def figures(self) -> None:
        """Send every open matplotlib figure as PNG and close it (``plt.show()``, and at the end of a cell)."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None or not str(pyplot.get_backend()).endswith("mpl_backend"):
            return
        import base64

        for number in pyplot.get_fignums():
            figure = pyplot.figure(number)
            buffer = io.BytesIO()
            try:
                figure.savefig(buffer, format="png", bbox_inches="tight")
            except Exception as error:
                print(f"nbworkers: figure {number} could not be drawn: {error!r}", file=sys.stderr, flush=True)
                continue
            finally:
                pyplot.close(figure)
            width, height = (int(v) for v in figure.get_size_inches() * figure.dpi)
            self.publish({"image/png": base64.b64encode(buffer.getvalue()).decode("ascii"),
                          "text/plain": f"<Figure size {width}x{height} with {len(figure.axes)} Axes>"}, {})


current: RichOutput | None = None  # the session worker's (the matplotlib backend's show() sends through it)


def install_rich_output(output: RichOutput) -> None:
    """Make ``display`` and matplotlib send through ``output`` in this process."""
    import os

    global current
    current = output
    os.environ.setdefault("MPLBACKEND", MPL_BACKEND)
    if "matplotlib" in sys.modules:  # imported before the first cell (a zygote, a sitecustomize): switch now
        try:
            sys.modules["matplotlib"].use(MPL_BACKEND)
        except Exception:
            pass
    from nbworkers.distlib.compat.import_hooks import when_imported

    when_imported("IPython.core.display_functions", output.patch_ipython)
