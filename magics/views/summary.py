"""Plain-text and HTML renderings of a cluster snapshot: the live fallback and the final summary.

These are what static renderers (nbconvert, GitHub, a headless nbclient run) and front ends without widget
support show. Every function takes a ``ClusterSnapshot`` (magics/shapes.py) and returns a string; they never
raise on missing fields (a snapshot from an older or partial run still renders).
"""

from __future__ import annotations

import html
from typing import Any, Final

from nbworkers.magics.shapes import ERROR_BELOW_KEY, ClusterSnapshot, WorkerSnapshot
from nbworkers.magics.views import compact

# the words of a snapshot (words.py); importers of summary find them here too (__all__)
from nbworkers.magics.views.words import (
    STATUS_COLORS,
    STATUS_LABELS,
    TRACEBACK_TAIL_LINES,
    epoch_text,
    exit_text,
    failed_workers,
    format_duration,
    format_metrics,
    format_number,
    headline,
    restart_lines,
    resume_text,
    snapshot_note,
    status_label,
    traceback_tail,
    worker_name,
)
from nbworkers.protocol.lines import SHORT_CUT_NOTE, cap_line
from nbworkers.protocol.statuses import ENDED, ClusterStatus, WorkerStatus

__all__ = [
    "ECHOED_KEY",
    "STATUS_COLORS",
    "STATUS_LABELS",
    "TRACEBACK_TAIL_LINES",
    "epoch_text",
    "exit_text",
    "failed_workers",
    "format_duration",
    "format_metrics",
    "format_number",
    "headline",
    "render_html",
    "render_summary_html",
    "render_text",
    "restart_lines",
    "resume_text",
    "status_label",
    "traceback_tail",
    "worker_name",
]

LIVE_TAIL_LINES = 3
OUTPUT_TAIL_LINES = 10  # per worker, in a final summary no blocking wait wrote the output beside (saved notebooks)
OUTPUT_LINE_CHARS = 300
# a blocking wait wrote the workers' output into the cell (magics/views/echo.py): no tails
ECHOED_KEY: Final = "output_echoed"


# ---------------------------------------------------------------------------------------------- text


def _many(snapshot: ClusterSnapshot) -> bool:
    """Enough workers for the compact rendering (settings().widget_compact_workers, as the widget)."""
    from nbworkers.magics.settings import settings

    return compact.is_compact(len(snapshot.get("workers") or []), settings().widget_compact_workers)


def _in_order(snapshot: ClusterSnapshot) -> list[WorkerSnapshot]:
    """The workers, stragglers first when there are many (compact.straggler_order), else by index."""
    workers = list(snapshot.get("workers") or [])
    if not _many(snapshot):
        return workers
    by_index = {w.get("index"): w for w in workers}
    return [by_index[i] for i in compact.straggler_order(workers)]


def _with_logs(snapshot: ClusterSnapshot) -> list[WorkerSnapshot]:
    """Whose log lines a summary quotes: everyone's, or with many workers the chief's and the flagged ones'."""
    workers = list(snapshot.get("workers") or [])
    if not _many(snapshot):
        return workers
    keep = set(compact.log_workers(workers, compact.flagged_workers(workers), None))
    return [w for w in workers if w.get("index") in keep]


def overview_text(snapshot: ClusterSnapshot) -> str:
    """``30 running, 2 failed; progress 41-47 %; 2.1-2.4 steps/s`` over all workers (the compact rendering)."""
    workers = snapshot.get("workers") or []
    counts: dict[str, int] = {}
    for worker in workers:
        counts[status_label(worker.get("status"))] = counts.get(status_label(worker.get("status")), 0) + 1
    parts = [", ".join(f"{n} {label}" for label, n in sorted(counts.items(), key=lambda p: -p[1]))]
    fractions = [f for w in workers if (f := compact.progress_fraction(w)) is not None]
    if fractions:
        parts.append(f"progress {_range(f'{min(fractions) * 100:.0f}', f'{max(fractions) * 100:.0f}')} %")
    rates = [r for w in workers if isinstance(r := w.get("steps_per_sec"), (int, float))]
    if rates:
        parts.append(f"{_range(f'{min(rates):.1f}', f'{max(rates):.1f}')} steps/s")
    return "; ".join(parts)


def _range(low: str, high: str) -> str:
    """``41-47``, or one value once when both print the same (``4``, not ``4-4``)."""
    return low if low == high else f"{low}-{high}"


def _compact_text(snapshot: ClusterSnapshot, done: bool) -> list[str]:
    """Many workers: an overview, the shared metrics once, one aligned row per worker (stragglers first)."""
    shared = compact.shared_metrics(snapshot.get("workers") or [])
    lines = [f"  {overview_text(snapshot)}"]
    if shared:
        lines.append(f"  every worker: {format_metrics(shared)}")
    rows = [("worker", "status", "progress", "steps/s", "restarts", "metrics")]
    for worker in _in_order(snapshot):
        rate = worker.get("steps_per_sec")
        own = {k: v for k, v in (worker.get("metrics") or {}).items() if k not in shared}
        status = status_label(worker.get("status")) + (f" ({exit_text(worker)})" if exit_text(worker) else "")
        rows.append((worker_name(worker), status, epoch_text(worker), f"{rate:.1f}" if rate else "",
                     str(worker.get("restarts") or 0), format_metrics(own)))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[5] for row in rows]
    if done and snapshot.get("run_dir"):
        lines.append(f"  logs: {snapshot['run_dir']}/worker-<index>.log")
    return [line.rstrip() for line in lines]


def render_text(snapshot: ClusterSnapshot) -> str:
    """A few lines for ``text/plain``: one per worker; log paths and the error when the run is over."""
    done = snapshot.get("status") in ENDED
    lines = [headline(snapshot)]
    if snapshot_note(snapshot):
        lines.append(f"  {snapshot_note(snapshot)}")
    many = _many(snapshot)
    if many:
        lines += _compact_text(snapshot, done)
    for worker in [] if many else snapshot.get("workers") or []:
        line = f"  {worker_name(worker)} {status_label(worker.get('status'))}"
        if worker.get("host"):
            line += f" on {worker['host']}"
        progress = epoch_text(worker)
        if progress:
            line += f"  {progress}"
        if worker.get("metrics"):
            line += f"  {format_metrics(worker['metrics'])}"
        if worker.get("steps_per_sec"):
            line += f"  {worker['steps_per_sec']:.1f} steps/s"
        if worker.get("restarts"):
            line += f"  restarts={worker['restarts']}"
        if exit_text(worker):
            line += f"  {exit_text(worker)}"
        lines.append(line)
        if done and worker.get("log_path"):
            lines.append(f"      log: {worker['log_path']}")
    lines.extend(f"  restart {i}: {line}" for i, line in enumerate(restart_lines(snapshot), 1))
    if done:
        lines.extend(_output_tails(snapshot))
    if snapshot.get("error"):
        lines.append(f"{_error_word(snapshot)}: {_error_line(snapshot)}")
    if snapshot.get(ERROR_BELOW_KEY):
        lines.append("  (the workers' traceback is in the error below)")
    elif done:
        for worker in _failed(snapshot):
            tail = traceback_tail(worker.get("log_tail"))
            if tail:
                lines.append(f"--- last lines of {worker_name(worker)} ---")
                lines.extend(f"    {x}" for x in tail)
    elif snapshot.get("run_dir"):
        lines.append(f"  logs: {snapshot['run_dir']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- HTML

_TABLE = 'style="border-collapse:collapse;font-size:0.9em"'
_CELL = 'style="padding:2px 8px;text-align:left;border-bottom:1px solid #ddd"'


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _badge(status: str | None) -> str:
    color = STATUS_COLORS.get(status or "", STATUS_COLORS[WorkerStatus.STARTING])
    return (
        f'<span class="nbw-status nbw-status-{_esc(status)}" style="color:#fff;background:{color};'
        f'border-radius:8px;padding:0 6px;font-size:0.85em">{_esc(status_label(status))}</span>'
    )


def _row(cells: list[str], tag: str = "td") -> str:
    return "<tr>" + "".join(f"<{tag} {_CELL}>{c}</{tag}>" for c in cells) + "</tr>"


def _worker_rows(snapshot: ClusterSnapshot, with_logs: bool) -> str:
    """The worker table; with many workers stragglers first, the shared metrics once above it, one log folder."""
    many = _many(snapshot)
    shared = compact.shared_metrics(snapshot.get("workers") or []) if many else {}
    with_logs = with_logs and not many
    header = ["worker", "host", "status", "progress", "metrics", "steps/s", "restarts"]
    if with_logs:
        header.append("log")
    rows = [_row([_esc(h) for h in header], "th")]
    for worker in _in_order(snapshot):
        status = _badge(worker.get("status"))
        if exit_text(worker):
            status += f" {_esc(exit_text(worker))}"
        rate = worker.get("steps_per_sec")
        cells = [
            _esc(worker_name(worker)),
            _esc(worker.get("host") or ""),
            status,
            _esc(epoch_text(worker)),
            _esc(format_metrics({k: v for k, v in (worker.get("metrics") or {}).items() if k not in shared})),
            _esc(f"{rate:.1f}" if rate else ""),
            _esc(worker.get("restarts") or 0),
        ]
        if with_logs:
            cells.append(f"<code>{_esc(worker.get('log_path') or '')}</code>")
        rows.append(_row(cells))
    table = f'<table class="nbw-workers" {_TABLE}>{"".join(rows)}</table>'
    if not many:
        return table
    above = f"<p>{_esc(overview_text(snapshot))}</p>"
    if shared:
        above += f"<p>Every worker: {_esc(format_metrics(shared))}</p>"
    below = (f'<p style="font-size:0.85em">Logs: <code>{_esc(snapshot.get("run_dir") or "")}/worker-&lt;index&gt;.log'
             "</code></p>") if snapshot.get("run_dir") and snapshot.get("status") in ENDED else ""
    return above + table + below


def _error_line(snapshot: ClusterSnapshot) -> str:
    """The run's error; only its first line when a ``RunFailed`` with the whole of it is raised below."""
    error = str(snapshot.get("error") or "")
    return (error.strip().splitlines() or [""])[0] if snapshot.get(ERROR_BELOW_KEY) else error


def _error_word(snapshot: ClusterSnapshot) -> str:
    """"Error" before a failure's message; "Why" before a stop's (e.g. its kernel restarted: not an error)."""
    return "Why" if snapshot.get("status") in (ClusterStatus.STOPPED, ClusterStatus.LOST) else "Error"


def _error_html(snapshot: ClusterSnapshot) -> str:
    parts = []
    if snapshot.get("error"):
        color = STATUS_COLORS[ClusterStatus.LOST if _error_word(snapshot) == "Why" else ClusterStatus.FAILED]
        parts.append(f'<p style="color:{color}"><b>{_error_word(snapshot)}:</b> {_esc(_error_line(snapshot))}</p>')
    if snapshot.get(ERROR_BELOW_KEY):
        parts.append("<p>The workers' traceback is in the error below.</p>")
        return "".join(parts)
    for worker in _failed(snapshot):
        tail = traceback_tail(worker.get("log_tail"))
        if tail:
            parts.append(
                f"<p>Last lines of {_esc(worker_name(worker))}:</p>"
                f'<pre style="max-height:24em;overflow:auto;font-size:0.85em">{_esc(chr(10).join(tail))}</pre>'
            )
    return "".join(parts)


def render_html(snapshot: ClusterSnapshot) -> str:
    """The live ``text/html`` view: a worker table and each worker's last log lines.

    Once the run is over this is the final summary (:func:`render_summary_html`).
    """
    if snapshot.get("status") in ENDED:
        return render_summary_html(snapshot)
    tails = []
    for worker in _with_logs(snapshot):
        last = (worker.get("log_tail") or [])[-LIVE_TAIL_LINES:]
        if last:
            tails.append(f"{worker_name(worker)}: " + "\n  ".join(last))
    logs = (f'<pre style="font-size:0.85em;max-height:12em;overflow:auto">{_esc(chr(10).join(tails))}</pre>'
            if tails else "")
    where = f'<p style="font-size:0.85em">Logs: <code>{_esc(snapshot.get("run_dir") or "")}</code></p>'
    return (
        f'<div class="nbw-fallback"><p><b>{_esc(headline(snapshot))}</b></p>'
        f"{_worker_rows(snapshot, with_logs=False)}{logs}{_error_html(snapshot)}{where}</div>"
    )


def _output_tails(snapshot: ClusterSnapshot) -> list[str]:
    """The last lines each worker printed (not the failed ones: their traceback is shown), prefixed ``[i]``, so a
    saved notebook keeps the workers' output; none when a blocking wait already wrote it into the cell."""
    if snapshot.get(ECHOED_KEY):
        return []
    out = []
    for worker in _with_logs(snapshot):
        if worker.get("status") == WorkerStatus.FAILED:
            continue
        tail = [x for x in (worker.get("log_tail") or []) if x.strip()][-OUTPUT_TAIL_LINES:]
        if not tail:
            continue
        out.append(f"--- last lines of {worker_name(worker)}'s output ---")
        index = worker.get("index", "?")
        out.extend(f"[{index}] {cap_line(x, OUTPUT_LINE_CHARS, SHORT_CUT_NOTE)}" for x in tail)
    return out


def render_summary_html(snapshot: ClusterSnapshot) -> str:
    """The final summary: status, epochs, last metrics, wall time, log paths, the error when it failed."""
    tails = _output_tails(snapshot)
    output = (f"<details><summary>The workers' last output lines</summary>"
              f'<pre style="max-height:24em;overflow:auto;font-size:0.85em">{_esc(chr(10).join(tails))}</pre></details>'
              if tails else "")
    restarts = ""
    history = restart_lines(snapshot)
    if history:
        items = "".join(f"<li>{_esc(line)}</li>" for line in history)
        restarts = f"<p>Restarts:</p><ul>{items}</ul>"
    return (
        f'<div class="nbw-summary"><p>{_badge(snapshot.get("status"))} <b>{_esc(headline(snapshot))}</b></p>'
        f"{_snapshot_note_html(snapshot)}"
        f"{_worker_rows(snapshot, with_logs=True)}{output}{_error_html(snapshot)}{restarts}"
        f'<p style="font-size:0.85em">Run directory: <code>{_esc(snapshot.get("run_dir") or "")}</code></p></div>'
    )


def _snapshot_note_html(snapshot: ClusterSnapshot) -> str:
    note = snapshot_note(snapshot)
    return f'<p class="nbw-snapshot-note"><i>{_esc(note)}</i></p>' if note else ""


_failed = failed_workers
