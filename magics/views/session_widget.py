"""The live view of a session cell: the usual widget (or text/HTML view), plus a ``session`` trait the widget's
header shows as one line (the session, the cell number, its state and what it runs) and a ``restart_confirm``
trait for its Restart button.

Restart of a session wipes every variable its cells made, so it asks first: the widget's first click turns the
button into "Confirm restart (state of cells 1-N is lost)" for a few seconds (``widget_header.js``), the second
restarts.
The view then waits (``session_restart_wait``) for the restarted workers and says what really happened
("restarted the session: state of cells 1-N lost"), with the new pids on the cards, also on a finished cell whose
own status does not change.
"""

from __future__ import annotations

import time
from typing import Any

from nbworkers.magics.settings import settings
from nbworkers.magics.shapes import ClusterSnapshot

RESTART_POLL = 0.2  # seconds between looks at the restarting session


def restart_confirm(session: dict[str, Any]) -> dict[str, str]:
    """What the Restart button says before it wipes state: {label (the confirm step), title}; empty when the
    processes hold no cell's state (nothing to lose, no confirm step)."""
    live = session.get("live_cells") or ""
    if not live or live == "no cell":
        return {}
    return {"label": f"Confirm restart (state of {live} is lost)",
            "title": f"Restart the session: the state of {live} is lost"}


def session_view_factory(cell: Any) -> Any:
    from nbworkers.magics.views.view import default_view_factory

    return default_view_factory(cell, _widget_view)


def _widget_view(cell: Any) -> Any:
    import traitlets as t

    from nbworkers.magics.views.widget import ClusterWidget, ClusterWidgetView, answer_on_frontend_subshell

    class SessionWidget(ClusterWidget):
        session = t.Dict().tag(sync=True)  # {name, cell, state, cells, running, live_cells}
        restart_confirm = t.Dict().tag(sync=True)  # {label, title}: Restart asks first (see the module docstring)

    class SessionCellWidgetView(ClusterWidgetView):
        def __init__(self, cluster: Any, **kwargs: Any):
            super().__init__(cluster, **kwargs)
            plain, self.widget = self.widget, SessionWidget()
            plain.close()
            self.cell = cluster  # the SessionCell (``self.cluster`` is typed as any run)
            self.widget.on_msg(self._on_custom_msg)
            answer_on_frontend_subshell(self.widget.comm)

        def _apply(self, snapshot: ClusterSnapshot) -> None:
            session = snapshot.get("session") or {}
            confirm = restart_confirm(session)
            with self._lock:
                if session != self.widget.session:
                    self.widget.session = session
                if confirm != self.widget.restart_confirm:
                    self.widget.restart_confirm = confirm
            super()._apply(snapshot)

        def finish(self, snapshot: ClusterSnapshot) -> None:
            super().finish(snapshot)
            with self._lock:
                self.widget.send_state(key=["session", "restart_confirm"])

        def _run_action(self, action: str) -> None:
            if action != "restart":
                return super()._run_action(action)
            self._restart_and_report()

        def _restart_and_report(self) -> None:
            """The (confirmed) Restart: restart the session's processes, wait for the new ones, and say what was
            lost; the cards show the new pids."""
            session = self.cell.session
            lost, before = session.live_cells(), session.restarts
            old_pids = {w.pid for w in session.state.workers}
            self._set_notice("Restarting the session…")
            try:
                session.restart()
            except Exception as error:  # the user sees it in the widget; nothing else would report it
                self._set_notice(f"Restart failed: {error}")
                return
            deadline = time.monotonic() + settings().session_restart_wait
            while time.monotonic() < deadline:
                pids = [w.pid for w in session.state.workers]
                if session.restarts > before and all(pids) and not old_pids & set(pids):
                    break
                time.sleep(RESTART_POLL)
            self.update(self.cell.snapshot())
            if session.restarts > before:
                self._set_notice(f"restarted the session: state of {lost} lost")
            else:
                self._set_notice(f"the session did not restart within {settings().session_restart_wait:g} s "
                                 "(session_restart_wait): see `%workers`")

    return SessionCellWidgetView(cell)
