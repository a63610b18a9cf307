"""``%workers`` in a kernel that restarted: this notebook's earlier runs, named, with the command that shows each.

A run records its notebook's path as its kernel got it (``JPY_SESSION_NAME``: ``state.json``'s ``notebook``,
magics/run/group_launch.py); the kernel that runs after a restart gets the same path. So the listing finds the runs
under the run root that this notebook started in an earlier kernel (not registered in this one):
``earlier in this notebook: plain (stopped) — `%workers attach plain```. Imports no TensorFlow.
"""

from __future__ import annotations

import html
import os
from collections.abc import Collection

from nbworkers.magics.rundir.listing import list_runs
from nbworkers.magics.shapes import RunRow
from nbworkers.protocol.statuses import LOST_LABEL, ClusterStatus

NOTEBOOK_ENV = "JPY_SESSION_NAME"  # the notebook's path, as the server gives it to the kernel
MAX_SHOWN = 8  # the newest ones; the sidebar lists every run


def earlier_runs(known: Collection[str], notebook: str | None = None, root: str | None = None) -> list[RunRow]:
    """This notebook's runs under the run root that this kernel does not hold (``known``: its runs' names), newest
    first; none when the kernel was not given its notebook's path."""
    notebook = os.environ.get(NOTEBOOK_ENV, "") if notebook is None else notebook
    if not notebook:
        return []
    try:
        rows = list_runs(root)
    except Exception:  # an unsafe or missing run root: the listing says nothing of earlier runs
        return []
    return [row for row in rows if row.get("notebook") == notebook and row["name"] not in known]


def _status(row: RunRow) -> str:
    status = LOST_LABEL if row["status"] == ClusterStatus.LOST else row["status"]
    kinds = [kind for kind, yes in (("session", row.get("session")), ("detached", row.get("detached"))) if yes]
    return ", ".join([status, *kinds])


def earlier_lines(rows: list[RunRow]) -> tuple[str, str]:
    """The listing's lines for ``rows`` (text, HTML): one per run, with its ``%workers attach`` command."""
    if not rows:
        return "", ""
    shown, more = rows[:MAX_SHOWN], len(rows) - MAX_SHOWN
    items = [(row["name"], _status(row)) for row in shown]
    rest = f"\n  … and {more} more (the sidebar lists them all)" if more > 0 else ""
    if len(items) == 1:
        name, status = items[0]
        text = f"earlier in this notebook: {name} ({status}) — `%workers attach {name}`"
        page = (f"<p>earlier in this notebook: {html.escape(name)} ({html.escape(status)}) — "
                f"<code>%workers attach {html.escape(name)}</code></p>")
        return text, page
    text = "earlier in this notebook:\n" + "\n".join(
        f"  {name} ({status}) — `%workers attach {name}`" for name, status in items) + rest
    page = "<p>earlier in this notebook:</p><ul>" + "".join(
        f"<li>{html.escape(name)} ({html.escape(status)}) — <code>%workers attach {html.escape(name)}</code></li>"
        for name, status in items) + "</ul>" + (f"<p>… and {more} more</p>" if more > 0 else "")
    return text, page
