"""Live views of a cluster in a cell's output.

A view (``shapes.View``) has ``show()`` (display it in the current output), ``update(snapshot)`` (called at
most every ``flush_interval`` seconds, from the supervisor thread or from a main-thread ``wait()``) and
``finish(snapshot)`` (the run ended: leave a final summary). ``TextView`` is the plain text/HTML one, shown
where no widget can be (and beside the widget, as its fallback).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from IPython.display import display

from nbworkers.magics.shapes import ClusterSnapshot, View
from nbworkers.magics.views import summary


def render_text(snapshot: ClusterSnapshot) -> str:
    return summary.render_text(snapshot)


def render_html(snapshot: ClusterSnapshot, final: bool = False) -> str:
    return summary.render_summary_html(snapshot) if final else summary.render_html(snapshot)


class HtmlBundle:
    """A text/plain + text/html bundle for IPython's display machinery."""

    def __init__(self, text: str, html: str):
        self.text, self.html = text, html

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text, "text/html": self.html}


class TextView:
    def __init__(self, cluster: Any):
        self.cluster = cluster
        self._handle = None
        self._lock = threading.Lock()

    def _bundle(self, snapshot: ClusterSnapshot, final: bool = False) -> HtmlBundle:
        return HtmlBundle(render_text(snapshot), render_html(snapshot, final=final))

    def show(self) -> None:
        self._handle = display(self._bundle(self.cluster.snapshot()), display_id=True)

    def update(self, snapshot: ClusterSnapshot) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.update(self._bundle(snapshot))

    def finish(self, snapshot: ClusterSnapshot) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.update(self._bundle(snapshot, final=True))


def default_view_factory(cluster: Any, widget_view: Callable[[Any], View] | None = None) -> View:
    """The live widget (``widget_view``, default ``ClusterWidgetView``) when the setting ``widget`` is on and the
    front end can show it, else the text/HTML view."""
    from nbworkers.magics.settings import settings

    if settings().widget:
        try:
            if widget_view is None:
                from nbworkers.magics.views.widget import ClusterWidgetView

                widget_view = ClusterWidgetView
            return widget_view(cluster)
        except Exception as error:  # no widget support here: the text/HTML view still shows the run
            import warnings

            warnings.warn(f"nbworkers: live widget unavailable ({error}); showing the text view", stacklevel=2)
    return TextView(cluster)
