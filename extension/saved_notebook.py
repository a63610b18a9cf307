"""A notebook saved through the Jupyter server keeps, for each finished nbworkers run, its static summary
instead of a widget view that cannot be shown again.

A widget output is a reference to a model that lives in the kernel. Opened later (another session, JupyterLab
after Notebook 7 or the other way round) without the model's state saved in the notebook's metadata, JupyterLab
and Notebook 7 show "Error displaying widget: model not found" and never the text/HTML beside it. So a
pre-save hook (registered by the server extension) drops the widget view from the outputs whose fallback is an
nbworkers *final* summary (the run ended: the summary says all there is) when the notebook does not carry that
model's state. The same for a run whose output still shows it live but whose kernel is gone (restarted or
dead: its state file says so), as no kernel will ever serve that model again. A final summary of a run that runs
again (Restart, the sidebar's Restart of an ended run: the same widget model, live again) keeps its widget view,
so a reload shows the live run, not the old summary. The page that saved keeps its live
widget (the hook changes the file, not the page); outputs of runs still going keep theirs, so a page reload
mid-run brings the live dashboard back; other libraries' widgets are left alone.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from nbworkers.magics.rundir.layout import run_dir_of
from nbworkers.magics.rundir.listing import describe
from nbworkers.protocol.statuses import is_terminal

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
FINAL_SUMMARY_MARK = 'class="nbw-summary"'  # magics/views/summary.py render_summary_html
LIVE_MARK = 'class="nbw-fallback"'  # magics/views/summary.py render_html, while the run goes on
RUN_NAME = re.compile(r"^nbworkers cluster (\S+): ", re.M)  # magics/views/summary.py headline


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def saved_widget_models(notebook: dict[str, Any]) -> set[str]:
    state = ((notebook.get("metadata") or {}).get("widgets") or {}).get(WIDGET_STATE) or {}
    return set((state.get("state") or {}).keys()) if isinstance(state, dict) else set()


def run_is_over(name: str) -> bool:
    """True when the run's state file says it ended, or that its kernel is gone (``lost``)."""
    try:
        described = describe(run_dir_of(name))
    except Exception:  # no such run here (another machine, cleaned up): nothing says it is over
        return False
    return described is not None and is_terminal(described.get("status") or "")


def run_is_live(name: str) -> bool:
    """True when the run's state file says it goes on (a run restarted after its final summary was shown)."""
    try:
        described = describe(run_dir_of(name))
    except Exception:  # no such run here: nothing says it goes on
        return False
    return described is not None and not is_terminal(described.get("status") or "")


def drop_stateless_run_widgets(notebook: dict[str, Any], over: Callable[[str], bool] = run_is_over,
                               live: Callable[[str], bool] = run_is_live) -> int:
    """Remove the widget view from nbworkers outputs of runs that are over (a final summary of a run that
    ``live(name)`` does not say runs again, or a live view whose run ``over(name)`` says ended) when the model
    state is not saved; how many."""
    saved = saved_widget_models(notebook)
    dropped = 0
    for cell in notebook.get("cells") or []:
        for output in cell.get("outputs") or []:
            data = output.get("data") if isinstance(output, dict) else None
            if not isinstance(data, dict) or WIDGET_VIEW not in data:
                continue
            html = _text(data.get("text/html"))
            found = RUN_NAME.search(_text(data.get("text/plain")))
            if FINAL_SUMMARY_MARK in html:
                if found is not None and live(found.group(1)):
                    continue
            elif LIVE_MARK not in html or found is None or not over(found.group(1)):
                continue
            view = data[WIDGET_VIEW]
            if isinstance(view, dict) and view.get("model_id") in saved:
                continue
            del data[WIDGET_VIEW]
            dropped += 1
    return dropped


def pre_save_hook(model: dict[str, Any], **kwargs: Any) -> None:
    """jupyter_server's pre-save hook signature (``model``, ``path``, ``contents_manager``)."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        drop_stateless_run_widgets(model["content"])
