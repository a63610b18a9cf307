"""The live view of a session cell: the usual widget (or text/HTML view), plus a ``session`` trait the widget's
header shows as one line: the session, the cell number, its state and what it runs."""

from __future__ import annotations

from typing import Any

from nbworkers.magics.shapes import ClusterSnapshot


def session_view_factory(cell: Any) -> Any:
    from nbworkers.magics.views.view import default_view_factory

    return default_view_factory(cell, _widget_view)


def _widget_view(cell: Any) -> Any:
    import traitlets as t

    from nbworkers.magics.views.widget import ClusterWidget, ClusterWidgetView, answer_on_frontend_subshell

    class SessionWidget(ClusterWidget):
        session = t.Dict().tag(sync=True)  # {name, cell, state, cells, running}

    class SessionCellWidgetView(ClusterWidgetView):
        def __init__(self, cluster: Any, **kwargs: Any):
            super().__init__(cluster, **kwargs)
            plain, self.widget = self.widget, SessionWidget()
            plain.close()
            self.widget.on_msg(self._on_custom_msg)
            answer_on_frontend_subshell(self.widget.comm)

        def _apply(self, snapshot: ClusterSnapshot) -> None:
            session = snapshot.get("session") or {}
            with self._lock:
                if session != self.widget.session:
                    self.widget.session = session
            super()._apply(snapshot)

        def finish(self, snapshot: ClusterSnapshot) -> None:
            super().finish(snapshot)
            with self._lock:
                self.widget.send_state(key=["session"])

    return SessionCellWidgetView(cell)
