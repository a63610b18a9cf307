"""The live training widget: an anywidget dashboard over a cluster's snapshots, and the view that shows it.

``ClusterWidgetView(cluster)`` implements the view protocol the cluster calls:

- ``show()`` displays the widget in the current cell output, in ONE output bundle together with a
  ``text/plain``/``text/html`` fallback (what static renderers and widget-less front ends show);
- ``update(snapshot)`` pushes a snapshot to the front end in one comm message holding only the parts that
  changed, chart history downsampled (the cluster paces the calls: at most one per ``flush_interval``);
- ``finish(snapshot)`` pushes the final state and rewrites the display's fallback with the final summary
  (called from the main thread during ``--block``/``%workers wait`` it lands in a headless run's output); an
  ``update`` of a finished view whose run runs again (Restart) puts the live fallback back (a reloaded page where
  the widget does not render shows it, not the old summary).

The front end is one ES module joined from these files (``ESM_PARTS``): uPlot (``vendor-uplot/``, MIT; the chart),
widget_cards.js (labels, formatting, cards, the compact view's rows), widget_chart.js (the chart), widget_title.js (the
browser tab's title), widget_header.js (header, buttons, a view whose kernel went away), widget_panels.js (chart and
log panels) and widget.js (the view that builds and wires them). Its CSS is uPlot's followed by widget.css and
widget_compact.css (the compact view of many workers). All of it ships in the package: nothing is fetched at run time.

The whole dashboard state lives in synced traits (``cluster``, ``logs``, ``series``, ``compact``, ``notice``), so a
page reload restores it from the kernel. From ``settings().widget_compact_workers`` workers on (8) the view sends
aggregates instead of every worker's series and log (``view_payloads``: compact.py, band_chart.py); the page shows
them as the compact view (rows stragglers first, a heat strip, the band chart, a log picker), and asks for one
more worker's log with a ``{"action": "log", "worker": i}`` message.

Stop/Restart clicks arrive as custom messages, possibly on a subshell
thread; they are run on a short-lived thread so the front end's message handler never blocks.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import anywidget
import traitlets as t

from nbworkers.magics.settings import settings
from nbworkers.magics.shapes import ClusterSnapshot
from nbworkers.magics.views import band_chart, compact
from nbworkers.magics.views.summary import render_html, render_text
from nbworkers.magics.views.words import status_css
from nbworkers.protocol.lines import SHORT_CUT_NOTE, cap_line
from nbworkers.protocol.statuses import ENDED

WIDGET_MIMETYPE = "application/vnd.jupyter.widget-view+json"
MAX_LOG_CHARS = 64_000  # per worker and update: a tail of long lines keeps only its newest ~64 kB
CARD_FIELDS = (
    "index", "role", "role_index", "host", "pid", "status", "detail", "exit_code", "epoch", "epochs_total",
    "step", "steps_total", "metrics", "steps_per_sec", "restarts", "log_path", "log_hidden",
)  # fmt: skip
CLUSTER_FIELDS = (
    "name", "backend", "status", "error", "started", "ended", "wall_time", "restarts", "restart_causes",
    "restart_history", "generation", "run_dir", "elastic", "isolation", "detached",
)  # fmt: skip
ACTIONS = ("stop", "restart")
PICK_ACTION = "log"  # the compact view's worker picker: {"action": "log", "worker": i} sends that worker's log too
STATE_TRAITS = ("cluster", "logs", "series", "compact", "notice", "updates")

_HERE = Path(__file__).parent
UPLOT_DIR = _HERE / "vendor-uplot"  # not a Python name: a data folder, no package
UPLOT_VERSION = "1.6.32"
# in this order (one module scope: each part uses what the parts before it declare)
ESM_PARTS = (UPLOT_DIR / "uPlot.iife.min.js", *(_HERE / f"widget{part}.js" for part in
             ("_cards", "_chart", "_title", "_header", "_panels", "")))
CSS_PARTS = (UPLOT_DIR / "uPlot.min.css", _HERE / "widget.css", _HERE / "widget_compact.css")


class ClusterLike(Protocol):
    name: str

    def snapshot(self) -> ClusterSnapshot: ...
    def stop(self) -> Any: ...
    def restart(self) -> Any: ...


# ------------------------------------------------------------------------------------- payload shaping


def clean_number(value: Any) -> Any:
    """A JSON-safe number, rounded to 6 significant digits; NaN/inf become strings (JSON has none)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, int):
        return value
    if not math.isfinite(value):
        return str(value)
    return float(f"{value:.6g}")


def card_payload(worker: Mapping[str, Any], leave_out: Collection[str] = ()) -> dict[str, Any]:
    card = {name: worker.get(name) for name in CARD_FIELDS}
    card["metrics"] = {k: clean_number(v) for k, v in (worker.get("metrics") or {}).items() if k not in leave_out}
    card["steps_per_sec"] = clean_number(worker.get("steps_per_sec"))
    return card


def cluster_payload(snapshot: Mapping[str, Any], shared: Collection[str] = ()) -> dict[str, Any]:
    """Everything but logs and chart history: the header and one card per worker (``shared``: metrics left out of
    the cards, shown once by the compact view)."""
    payload = {name: snapshot.get(name) for name in CLUSTER_FIELDS}
    payload["wall_time"] = clean_number(snapshot.get("wall_time"))
    payload["workers"] = [card_payload(w, shared) for w in snapshot.get("workers") or []]
    return payload


def logs_payload(
    snapshot: Mapping[str, Any], max_lines: int, max_chars: int | None = None, max_total: int = MAX_LOG_CHARS,
    only: Collection[int] | None = None,
) -> list[list[str]]:
    """Each worker's log tail (newest last), bounded in lines, line length (``max_chars``, default the setting
    ``widget_line_chars``) and total size (``only``: these workers' tails, the others' empty)."""
    if max_chars is None:
        max_chars = settings().widget_line_chars
    out: list[list[str]] = []
    for worker in snapshot.get("workers") or []:
        if only is not None and worker.get("index") not in only:
            out.append([])
            continue
        lines = (worker.get("log_tail") or [])[-max_lines:] if max_lines > 0 else []
        kept: list[str] = []
        total = 0
        for line in reversed(lines):
            line = cap_line(line, max_chars, SHORT_CUT_NOTE)
            total += len(line) + 1
            if total > max_total and kept:
                break
            kept.append(line)
        out.append(kept[::-1])
    return out


def downsample(history: Sequence[Any], max_points: int) -> dict[str, Any]:
    """Chart series ``{"x": [...], "metrics": {name: [value or None, ...]}}`` of at most ~max_points.

    Points are grouped into runs of consecutive entries whose step falls in the same bucket of width
    ``w`` (a power of two, so buckets stay put while the run grows); a bucket's value is the mean of its
    points, its x the last step. A step going backwards (a restart) starts a new bucket.
    """
    points = [(x, m) for x, m in history if isinstance(x, (int, float)) and isinstance(m, (dict, tuple, list))]
    if not points:
        return {"x": [], "metrics": {}}
    xs = [x for x, _ in points]
    span = max(xs) - min(xs)
    width = 1
    while span / width > max_points:
        width *= 2
    buckets: list[tuple[float, dict[str, list[float]]]] = []
    current_key = None
    for x, metrics in points:
        key = math.floor(x / width)
        if key != current_key or not buckets:
            buckets.append((x, {}))
            current_key = key
        sums = buckets[-1][1]
        buckets[-1] = (x, sums)
        for name, value in compact.metric_items(metrics):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                sums.setdefault(name, []).append(float(value))
    if len(buckets) > 2 * max_points:  # many restarts: fall back to a plain stride
        stride = math.ceil(len(buckets) / max_points)
        buckets = buckets[::stride] + ([buckets[-1]] if (len(buckets) - 1) % stride else [])
    names = sorted({name for _, sums in buckets for name in sums})
    return {
        "x": [clean_number(x) for x, _ in buckets],
        "metrics": {
            name: [clean_number(sum(v) / len(v)) if (v := sums.get(name)) else None for _, sums in buckets]
            for name in names
        },
    }


def series_payload(snapshot: Mapping[str, Any], max_points: int) -> list[dict[str, Any]]:
    return [
        {"index": w.get("index"), **downsample(w.get("history") or [], max_points)}
        for w in snapshot.get("workers") or []
    ]


def view_payloads(snapshot: Mapping[str, Any], *, max_points: int, max_lines: int, compact_from: int,
                  picked: int | None = None, chart: band_chart.ChartAccumulator | None = None,
                  flags: compact.FlagScanner | None = None, rows: compact.SteadyRows | None = None,
                  ) -> dict[str, Any]:
    """The synced traits for one snapshot. With many workers (``compact_from``, magics/views/compact.py) the chart is
    the band and a few lines, the logs are the chief's, the flagged workers' and the picked one's, and metrics equal
    on every worker leave the cards: a few tens of kilobytes at 64 workers instead of megabytes. ``chart``: the
    view's chart, kept from update to update (band_chart.ChartAccumulator), else one made for this snapshot; ``flags``
    likewise, the workers whose logs show errors or warnings (compact.FlagScanner), and ``rows`` the rows' order
    (compact.SteadyRows: a row moves on a change of status or a clear lag only)."""
    workers = snapshot.get("workers") or []
    if not compact.is_compact(len(workers), compact_from):
        return {"cluster": cluster_payload(snapshot), "logs": logs_payload(snapshot, max_lines),
                "series": series_payload(snapshot, max_points), "compact": {}}
    shared = compact.shared_metrics(workers)
    chief = compact.chief_index(workers)
    flagged = compact.flagged_workers(workers) if flags is None else flags.update(workers)
    shown_logs = compact.log_workers(workers, flagged, picked)
    chart = chart or band_chart.ChartAccumulator(max_points)
    chart.update(workers)
    outliers = chart.outliers(exclude=[chief])
    return {
        "cluster": cluster_payload(snapshot, shared),
        "logs": logs_payload(snapshot, max_lines, only=set(shown_logs)),
        "series": [],
        "compact": {
            "chief": chief,
            "order": compact.straggler_order(workers) if rows is None else rows.update(workers),
            "shared": {k: clean_number(v) for k, v in shared.items()},
            "outliers": outliers,
            "flagged": flagged,
            "logs_of": shown_logs,
            "chart": chart.payload(band_chart.lines_to_draw(chief, outliers), outliers),
        },
    }


def bundle(widget: "ClusterWidget", snapshot: ClusterSnapshot) -> dict[str, Any]:
    """The output bundle: the widget view plus its text/HTML fallback."""
    return {
        "text/plain": render_text(snapshot),
        "text/html": render_html(snapshot),
        WIDGET_MIMETYPE: {"version_major": 2, "version_minor": 0, "model_id": widget.model_id},
    }


# -------------------------------------------------------------------------------------------- widget


def joined(parts: tuple[Path, ...]) -> str:
    """One self-contained ES module (or style sheet) for anywidget: it loads ``_esm`` from a blob URL, where a
    module cannot import a sibling file."""
    return "\n".join(part.read_text(encoding="utf-8") for part in parts)


class ClusterWidget(anywidget.AnyWidget):
    """The dashboard's model. All state is in these traits (a reloaded page gets it back from the kernel)."""

    _esm = joined(ESM_PARTS)
    _css = joined(CSS_PARTS) + "\n" + status_css()  # the status colours: protocol/statuses.py LOOKS

    cluster = t.Dict().tag(sync=True)  # header + cards (cluster_payload)
    logs: t.List[list[str]] = t.List().tag(sync=True)  # per worker: list of log lines (logs_payload)
    series: t.List[dict[str, Any]] = t.List().tag(sync=True)  # per worker: downsampled chart history (series_payload)
    compact = t.Dict().tag(sync=True)  # many workers: order, shared metrics, band chart, flagged logs (view_payloads)
    notice = t.Unicode("").tag(sync=True)  # feedback on a Stop/Restart click
    updates = t.Int(0).tag(sync=True)  # messages sent so far (tests and debugging)

    def __repr__(self) -> str:
        return f"<ClusterWidget {self.cluster.get('name', '')!r} {self.cluster.get('status', '')}>"


class ClusterWidgetView:
    """The widget view of one cluster (see the module docstring for the protocol)."""

    def __init__(self, cluster: ClusterLike, *, max_points: int | None = None):
        self.cluster = cluster
        self.max_points = max_points or settings().widget_chart_points
        self.compact_from = settings().widget_compact_workers
        self._picked: int | None = None  # the compact view's worker picker: this worker's log is sent too
        self._last_snapshot: ClusterSnapshot | None = None
        self._chart = band_chart.ChartAccumulator(self.max_points)
        self._flags = compact.FlagScanner()
        self._rows = compact.SteadyRows()
        self.widget = ClusterWidget()
        self.widget.on_msg(self._on_custom_msg)
        answer_on_frontend_subshell(self.widget.comm)
        self._lock = threading.RLock()
        self._sent: dict[str, Any] = {}
        self._handle: Any = None
        self._last_status: str | None = None
        self._summary_shown = False  # the display's fallback holds the final summary (finish())

    # ---- the view protocol

    def show(self) -> None:
        from IPython.display import display

        snapshot = self.cluster.snapshot()
        self._apply(snapshot)
        self._handle = display(bundle(self.widget, snapshot), raw=True, display_id=True)

    def update(self, snapshot: ClusterSnapshot) -> None:
        self._apply(snapshot)
        if self._summary_shown and snapshot.get("status") not in ENDED and self._handle is not None:
            # an ended run runs again (Restart; the sidebar's on an ended run): the display's fallback, what a
            # reloaded page shows where the widget does not render, goes back from the final summary to the live view
            self._summary_shown = False
            self._handle.update(bundle(self.widget, snapshot), raw=True)

    def finish(self, snapshot: ClusterSnapshot) -> None:
        self._apply(snapshot)
        with self._lock:  # resend it all: a headless run records only the messages of the cell being run
            self.widget.send_state(key=list(STATE_TRAITS))
        if self._handle is not None:
            self._handle.update(bundle(self.widget, snapshot), raw=True)
            self._summary_shown = snapshot.get("status") in ENDED

    def close(self) -> None:
        self.widget.close()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return bundle(self.widget, self.cluster.snapshot())

    # ---- sending state

    def _apply(self, snapshot: ClusterSnapshot) -> None:
        """Set every trait that changed, in one comm message (calls from several threads go out one by one)."""
        max_lines = settings().log_tail_lines
        with self._lock:
            self._last_snapshot = snapshot
            new = view_payloads(snapshot, max_points=self.max_points, max_lines=max_lines,
                                compact_from=self.compact_from, picked=self._picked, chart=self._chart,
                                flags=self._flags, rows=self._rows)
            changed = {k: v for k, v in new.items() if not _same(k, self._sent.get(k), v)}
            status = new["cluster"].get("status")
            clear_notice = self.widget.notice and status != self._last_status
            if not changed and not clear_notice:
                return
            self._last_status = status
            with self.widget.hold_sync():
                for name, value in changed.items():
                    setattr(self.widget, name, value)
                    self._sent[name] = value
                if clear_notice:
                    self.widget.notice = ""
                self.widget.updates += 1

    # ---- buttons

    def _on_custom_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        action = content.get("action") if isinstance(content, dict) else None
        if action == PICK_ACTION:
            self._pick_log(content.get("worker"))
            return
        if action not in ACTIONS:
            return
        threading.Thread(target=self._run_action, args=(action,), name=f"nbworkers-{action}", daemon=True).start()

    def _run_action(self, action: str) -> None:
        label = {"stop": "Stopping", "restart": "Restarting"}[action]
        self._set_notice(f"{label}…")
        try:
            getattr(self.cluster, action)()
        except Exception as error:  # the user sees it in the widget; nothing else would report it
            self._set_notice(f"{action.capitalize()} failed: {error}")

    def _pick_log(self, worker: Any) -> None:
        """The reader picked a worker in the compact view's log picker: send its tail too, from now on."""
        if not isinstance(worker, int) or isinstance(worker, bool) or worker < 0:
            return
        with self._lock:
            self._picked = worker
            snapshot = self._last_snapshot
        if snapshot is not None:
            self._apply(snapshot)

    def _set_notice(self, text: str) -> None:
        with self._lock:
            self.widget.notice = text


def answer_on_frontend_subshell(comm: Any) -> None:
    """Handle this comm's front-end messages on the subshell the front end chose, so clicks work while busy.

    JupyterLab >= 4.4 sends comm messages on a kernel subshell (its own thread). ipykernel >= 7.x re-routes
    a comm's incoming messages to the subshell that last *sent* on it (``_reply_subshell_for``); our updates
    go out from the main shell or the supervisor thread, so Stop would wait for a busy main shell. None of
    this widget's messages is a reply to a kernel request, so the front end's choice is the right one.
    """
    if comm is not None and hasattr(comm, "_reply_subshell_for"):
        comm._reply_subshell_for = lambda data, default: default


def _same(name: str, old: Any, new: Any) -> bool:
    """Equal for sending purposes: the running wall clock alone is not worth a message (the page ticks it)."""
    if old is None:
        return False
    if name == "cluster" and new.get("status") not in ENDED:
        return {**old, "wall_time": None} == {**new, "wall_time": None}
    return old == new
