"""The live training widget: an anywidget dashboard over a cluster's snapshots, and the view that shows it.

``ClusterWidgetView(cluster)`` implements the view protocol the cluster calls:

- ``show()`` displays the widget in the current cell output, in ONE output bundle together with a
  ``text/plain``/``text/html`` fallback (what static renderers and widget-less front ends show);
- ``update(snapshot)`` pushes a snapshot to the front end: at most one comm message per
  ``settings().flush_interval``, only the parts that changed, chart history downsampled;
- ``finish(snapshot)`` pushes the final state and rewrites the display's fallback with the final summary
  (called from the main thread during ``--block``/``%workers wait`` it lands in a headless run's output).

The whole dashboard state lives in synced traits (``cluster``, ``logs``, ``series``, ``notice``), so a page
reload restores it from the kernel. Stop/Restart clicks arrive as custom messages, possibly on a subshell
thread; they are run on a short-lived thread so the front end's message handler never blocks.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol

import anywidget
import traitlets as t

from .settings import settings
from .summary import render_html, render_text
from .state import DONE_STATES

WIDGET_MIMETYPE = "application/vnd.jupyter.widget-view+json"
MAX_CHART_POINTS = 300  # per worker; history is bucketed by step so older points stay put
MAX_LINE_CHARS = 2000  # longer log lines are cut in the widget (the log file keeps them whole)
MAX_LOG_CHARS = 64_000  # per worker and update: a tail of long lines keeps only its newest ~64 kB
CARD_FIELDS = (
    "index", "role", "role_index", "host", "pid", "status", "detail", "exit_code", "epoch", "epochs_total",
    "step", "steps_total", "metrics", "steps_per_sec", "restarts", "log_path", "log_hidden",
)  # fmt: skip
CLUSTER_FIELDS = (
    "name", "backend", "status", "error", "started", "ended", "wall_time", "restarts", "restart_causes",
    "restart_history", "generation", "run_dir",
)  # fmt: skip
ACTIONS = ("stop", "restart")
STATE_TRAITS = ("cluster", "logs", "series", "notice", "updates")

_HERE = Path(__file__).parent


class ClusterLike(Protocol):
    name: str

    def snapshot(self) -> dict[str, Any]: ...
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


def card_payload(worker: dict[str, Any]) -> dict[str, Any]:
    card = {name: worker.get(name) for name in CARD_FIELDS}
    card["metrics"] = {k: clean_number(v) for k, v in (worker.get("metrics") or {}).items()}
    card["steps_per_sec"] = clean_number(worker.get("steps_per_sec"))
    return card


def cluster_payload(snapshot: dict[str, Any]) -> dict[str, Any]:
    """Everything but logs and chart history: the header and one card per worker."""
    payload = {name: snapshot.get(name) for name in CLUSTER_FIELDS}
    payload["wall_time"] = clean_number(snapshot.get("wall_time"))
    payload["workers"] = [card_payload(w) for w in snapshot.get("workers") or []]
    return payload


def logs_payload(
    snapshot: dict[str, Any], max_lines: int, max_chars: int = MAX_LINE_CHARS, max_total: int = MAX_LOG_CHARS
) -> list[list[str]]:
    """Each worker's log tail (newest last), bounded in lines, line length and total size."""
    out = []
    for worker in snapshot.get("workers") or []:
        lines = (worker.get("log_tail") or [])[-max_lines:] if max_lines > 0 else []
        kept: list[str] = []
        total = 0
        for line in reversed(lines):
            line = line if len(line) <= max_chars else line[:max_chars] + " …[cut]"
            total += len(line) + 1
            if total > max_total and kept:
                break
            kept.append(line)
        out.append(kept[::-1])
    return out


def downsample(history: list, max_points: int = MAX_CHART_POINTS) -> dict[str, Any]:
    """Chart series ``{"x": [...], "metrics": {name: [value or None, ...]}}`` of at most ~max_points.

    Points are grouped into runs of consecutive entries whose step falls in the same bucket of width
    ``w`` (a power of two, so buckets stay put while the run grows); a bucket's value is the mean of its
    points, its x the last step. A step going backwards (a restart) starts a new bucket.
    """
    points = [(x, m) for x, m in history if isinstance(x, (int, float)) and isinstance(m, dict)]
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
        for name, value in metrics.items():
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


def series_payload(snapshot: dict[str, Any], max_points: int = MAX_CHART_POINTS) -> list[dict[str, Any]]:
    return [
        {"index": w.get("index"), **downsample(w.get("history") or [], max_points)}
        for w in snapshot.get("workers") or []
    ]


def bundle(widget: "ClusterWidget", snapshot: dict[str, Any]) -> dict[str, Any]:
    """The output bundle: the widget view plus its text/HTML fallback."""
    return {
        "text/plain": render_text(snapshot),
        "text/html": render_html(snapshot),
        WIDGET_MIMETYPE: {"version_major": 2, "version_minor": 0, "model_id": widget.model_id},
    }


# ------------------------------------------------------------------------------------------ throttle


class Throttle:
    """Calls ``send(item)`` at most once per ``interval`` with the newest item offered (trailing edge).

    Thread-safe; a timer thread delivers an item offered too soon. ``flush()`` delivers now.
    """

    def __init__(
        self,
        interval: float,
        send: Callable[[Any], None],
        clock: Callable[[], float] = time.monotonic,
        timer: Callable[[float, Callable[[], None]], Any] | None = None,
    ):
        self.interval = interval
        self._send = send
        self._clock = clock
        self._make_timer = timer or _start_timer
        self._lock = threading.RLock()
        self._pending: Any = None
        self._has_pending = False
        self._last = -math.inf
        self._timer: Any = None

    def offer(self, item: Any) -> None:
        with self._lock:
            self._pending, self._has_pending = item, True
            wait = self._last + self.interval - self._clock()
            if wait <= 0 and self._timer is None:
                self._deliver()
            elif self._timer is None:
                self._timer = self._make_timer(wait, self._on_timer)

    def flush(self, item: Any = None, *, replace: bool = False) -> None:
        """Deliver ``item`` (when replace) or whatever is pending, now, and cancel a waiting timer."""
        with self._lock:
            if replace:
                self._pending, self._has_pending = item, True
            if self._timer is not None:
                getattr(self._timer, "cancel", lambda: None)()
                self._timer = None
            if self._has_pending:
                self._deliver()

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
            if self._has_pending:
                self._deliver()

    def _deliver(self) -> None:
        item, self._pending, self._has_pending = self._pending, None, False
        self._last = self._clock()
        self._send(item)


def _start_timer(delay: float, fn: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(max(delay, 0.0), fn)
    timer.daemon = True
    timer.name = "nbworkers-widget-flush"
    timer.start()
    return timer


# -------------------------------------------------------------------------------------------- widget


class ClusterWidget(anywidget.AnyWidget):
    """The dashboard's model. All state is in these traits (a reloaded page gets it back from the kernel)."""

    _esm = _HERE / "widget.js"
    _css = _HERE / "widget.css"

    cluster = t.Dict().tag(sync=True)  # header + cards (cluster_payload)
    logs = t.List().tag(sync=True)  # per worker: list of log lines (logs_payload)
    series = t.List().tag(sync=True)  # per worker: downsampled chart history (series_payload)
    notice = t.Unicode("").tag(sync=True)  # feedback on a Stop/Restart click
    updates = t.Int(0).tag(sync=True)  # messages sent so far (tests and debugging)

    def __repr__(self) -> str:
        return f"<ClusterWidget {self.cluster.get('name', '')!r} {self.cluster.get('status', '')}>"


class ClusterWidgetView:
    """The widget view of one cluster (see the module docstring for the protocol)."""

    def __init__(self, cluster: ClusterLike, *, max_points: int | None = None, interval: float | None = None):
        self.cluster = cluster
        # optional settings (WorkerSettings may grow them); the constants are the defaults
        self.max_points = max_points or getattr(settings(), "widget_chart_points", MAX_CHART_POINTS)
        self.widget = ClusterWidget()
        self.widget.on_msg(self._on_custom_msg)
        answer_on_frontend_subshell(self.widget.comm)
        self._lock = threading.RLock()
        self._sent: dict[str, Any] = {}
        self._handle: Any = None
        self._last_status: str | None = None
        interval = settings().flush_interval if interval is None else interval
        self._throttle = Throttle(interval, self._apply)

    # ---- the view protocol

    def show(self) -> None:
        from IPython.display import display

        snapshot = self.cluster.snapshot()
        self._throttle.flush(snapshot, replace=True)
        self._handle = display(bundle(self.widget, snapshot), raw=True, display_id=True)

    def update(self, snapshot: dict[str, Any]) -> None:
        self._throttle.offer(snapshot)

    def finish(self, snapshot: dict[str, Any]) -> None:
        self._throttle.flush(snapshot, replace=True)
        with self._lock:  # resend it all: a headless run records only the messages of the cell being run
            self.widget.send_state(key=list(STATE_TRAITS))
        if self._handle is not None:
            self._handle.update(bundle(self.widget, snapshot), raw=True)

    def close(self) -> None:
        self.widget.close()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return bundle(self.widget, self.cluster.snapshot())

    # ---- sending state

    def _apply(self, snapshot: dict[str, Any]) -> None:
        """Set every trait that changed, in one comm message."""
        max_lines = settings().log_tail_lines
        new = {
            "cluster": cluster_payload(snapshot),
            "logs": logs_payload(snapshot, max_lines),
            "series": series_payload(snapshot, self.max_points),
        }
        with self._lock:
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
    if name == "cluster" and new.get("status") not in DONE_STATES:
        return {**old, "wall_time": None} == {**new, "wall_time": None}
    return old == new
