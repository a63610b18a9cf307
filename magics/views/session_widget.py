"""The live view of a session cell: the usual widget (or text/HTML view), plus a ``session`` trait the widget's
header shows as one line (the session, the cell number, its state and what it runs) and a ``restart_confirm``
trait for its Restart button.

Restart of a session ends the processes that hold every variable its cells made (the workers save them first:
values come back by themselves, models when the cells that build them run again), so it asks first: the widget's
first click turns the button into "Confirm restart (state of cells 1-N is saved first)" for a few seconds
(``widget_header.js``), the second restarts.
The view then waits (``session_restart_wait``) for the restarted workers and says what really happened (the
session's ``lost_note``: what was kept, what to run, what was lost), with the new pids on the cards, also on a
finished cell whose own status does not change.
"""

from __future__ import annotations

import time
from typing import Any

from nbworkers.magics.settings import settings
from nbworkers.magics.shapes import ClusterSnapshot

RESTART_POLL = 0.2  # seconds between looks at the restarting session


def restart_confirm(session: dict[str, Any]) -> dict[str, str]:
    """What the Restart button says before it ends the processes: {label (the confirm step), title}; empty when
    the processes hold no cell's state (nothing to save, no confirm step)."""
    live = session.get("live_cells") or ""
    if not live or live == "no cell":
        return {}
    return {"label": f"Confirm restart (state of {live} is saved first)",
            "title": f"Restart the session's processes: the workers save the state of {live} first (values come "
                     "back by themselves, models when the cells that build them run again)"}


def restarted_notice(live: str, lost_note: str) -> str:
    """What the widget says once the session restarted: the items of its ``lost_note`` (kept, run, lost), or, when
    nothing was saved, that the state of ``live`` is lost."""
    items = [line[2:] for line in lost_note.splitlines() if line.startswith("- ")]
    return "restarted the session: " + ("; ".join(items) if items else f"state of {live} lost")


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
                self._set_notice(restarted_notice(lost, session.lost_note))
            else:
                self._set_notice(f"the session did not restart within {settings().session_restart_wait:g} s "
                                 "(session_restart_wait): see `%workers`")

    return SessionCellWidgetView(cell)
