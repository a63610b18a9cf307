"""A session's part of its run's snapshot (the one snapshot the views, ``state.json`` and the REST API read).

``session``: its cells (how many, the running one, the queue), idle or busy, which cells' state the processes hold,
what a restart lost and what was saved. The run's own worker entries carry the progress of the cell that ran last:
an idle session shows none (no step, no steps/s), so the sidebar does not show a finished cell's rate as live.
Pure: a plain dict in, a plain dict out.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from nbworkers.magics.sessions.core import SessionCore
from nbworkers.magics.shapes import ClusterSnapshot


def session_summary(name: str, core: SessionCore, put_back: Collection[str] = ()) -> dict[str, Any]:
    """``snapshot["session"]``: the shape the sidebar (labextension/src/api.ts ``ISessionSummary``) reads.
    ``put_back``: the saved names the cells since the restart got back (``%workers`` no longer advises them)."""
    return {
        "name": name, "cells": core.user_cells, "state": "busy" if core.busy else "idle",
        "cell": core.current, "queued": len(core.queue), "alive_from": core.alive_from, "lost": core.lost_note,
        "saved": core.saved.summary(name, put_back) if core.saved is not None else "",
    }


def with_session(snapshot: ClusterSnapshot, summary: dict[str, Any]) -> ClusterSnapshot:
    """The run's snapshot with the session's part; an idle session's workers show no cell's progress."""
    snapshot["session"] = summary
    if summary["state"] == "idle":
        for worker in snapshot["workers"]:  # the last cell's progress, not the session's
            worker["epoch"] = worker["epochs_total"] = worker["step"] = worker["steps_total"] = None
            worker["steps_per_sec"] = None
    return snapshot
