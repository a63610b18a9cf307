"""Plain-text and HTML renderings of a cluster snapshot: the live fallback and the final summary.

These are what static renderers (nbconvert, GitHub, a headless nbclient run) and front ends without widget
support show. Every function takes a ``ClusterSnapshot`` (magics/shapes.py) and returns a string; they never
raise on missing fields (a snapshot from an older or partial run still renders).
"""

from __future__ import annotations

import html
import math
import signal
from typing import Any, Final

from nbworkers.magics.run.core.state import DONE_STATES
from nbworkers.magics.run.core.statuses import ClusterStatus, WorkerStatus
from nbworkers.magics.shapes import ERROR_BELOW_KEY, ClusterSnapshot, WorkerSnapshot
from nbworkers.protocol.lines import SHORT_CUT_NOTE, cap_line

# One label and one colour for every status of a run and of a worker (magics/run/core/statuses.py; a test holds that).
# (The two enums share their values: a key stands for the run's status and the worker's alike.)
STATUS_LABELS: dict[str, str] = {
    WorkerStatus.STARTING: "starting",
    WorkerStatus.WAITING: "waiting for peers",
    WorkerStatus.RUNNING: "running",
    WorkerStatus.FINISHED: "finished",
    WorkerStatus.FAILED: "failed",
    WorkerStatus.STOPPED: "stopped",
    WorkerStatus.RESTARTING: "restarting",
    WorkerStatus.STOPPING: "stopping",
    ClusterStatus.LOST: "lost (its kernel died)",
}
# badge colours, shared with widget.css in spirit (inline here: static renderers drop <style>)
STATUS_COLORS: dict[str, str] = {
    WorkerStatus.STARTING: "#6b7280",
    WorkerStatus.WAITING: "#b45309",
    WorkerStatus.RUNNING: "#1d4ed8",
    WorkerStatus.FINISHED: "#15803d",
    WorkerStatus.FAILED: "#b91c1c",
    WorkerStatus.STOPPED: "#6b21a8",
    WorkerStatus.RESTARTING: "#c2410c",
    WorkerStatus.STOPPING: "#7c3aed",
    ClusterStatus.LOST: "#374151",
}
TRACEBACK_TAIL_LINES = 20
LIVE_TAIL_LINES = 3
OUTPUT_TAIL_LINES = 10  # per worker, in a final summary no blocking wait wrote the output beside (saved notebooks)
OUTPUT_LINE_CHARS = 300
# a blocking wait wrote the workers' output into the cell (magics/views/echo.py): no tails
ECHOED_KEY: Final = "output_echoed"


def failed_workers(snapshot: ClusterSnapshot) -> list[WorkerSnapshot]:
    return [w for w in snapshot.get("workers") or [] if w.get("status") == WorkerStatus.FAILED]


def status_label(status: str | None) -> str:
    return STATUS_LABELS.get(status or "", status or "unknown")


def format_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s"


def format_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}"


def format_metrics(metrics: dict[str, Any] | None) -> str:
    return ", ".join(f"{name}={format_number(value)}" for name, value in (metrics or {}).items())


def worker_name(worker: WorkerSnapshot) -> str:
    role = worker.get("role") or "worker"
    return f"#{worker.get('index', '?')} {role}:{worker.get('role_index', 0)}"


def epoch_text(worker: WorkerSnapshot) -> str:
    """``epoch 2/5 step 30/100``; empty parts are left out. Reports are 1-based, as Keras prints them."""
    parts = []
    epoch, epochs_total = worker.get("epoch"), worker.get("epochs_total")
    if epoch is not None:
        parts.append(f"epoch {epoch}/{epochs_total}" if epochs_total else f"epoch {epoch}")
    step, steps_total = worker.get("step"), worker.get("steps_total")
    if step is not None:
        parts.append(f"step {step}/{steps_total}" if steps_total else f"step {step}")
    return " ".join(parts)


def traceback_tail(lines: list[str] | None, limit: int = TRACEBACK_TAIL_LINES) -> list[str]:
    """The last traceback in a log tail (from its ``Traceback`` line), else the last lines."""
    lines = list(lines or [])
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if "Traceback (most recent call last)" in lines[i]:
            start = i
            break
    tail = lines[start:] if start is not None else lines
    return tail[-limit:]


_NOT_NEWS = (WorkerStatus.STOPPED, WorkerStatus.FINISHED, WorkerStatus.RESTARTING)  # ended as nbworkers meant


def exit_text(worker: WorkerSnapshot) -> str:
    """How a worker's process ended, in words: ``exit code 1``, ``killed by SIGKILL``; nothing for a clean exit
    or for a worker nbworkers stopped (its SIGTERM/SIGKILL is not news: the status says "stopped")."""
    code = worker.get("exit_code")
    if code in (None, 0) or worker.get("status") in _NOT_NEWS:
        return ""
    if isinstance(code, int) and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def headline(snapshot: ClusterSnapshot) -> str:
    status = snapshot.get("status") or "unknown"
    workers = snapshot.get("workers") or []
    label = "stopped by you" if status == ClusterStatus.STOPPED else status_label(status)
    text = f"nbworkers cluster {snapshot.get('name', '?')}: {label}"
    text += f", {len(workers)} worker{'s' if len(workers) != 1 else ''}"
    verb = "in" if status in DONE_STATES else "for"
    text += f", {verb} {format_duration(snapshot.get('wall_time'))}"
    if snapshot.get("restarts"):
        text += f", {snapshot['restarts']} restart{'s' if snapshot['restarts'] != 1 else ''}"
    return text


def resume_text(resumed: dict[str, Any] | None) -> str:
    """Where a restarted group went on: from a checkpoint (which epoch and step) or from scratch.

    ``resumed`` is the first progress after the restart (``restart_history[i]["resumed_from"]``); a group
    that reports epoch 1 (or none) at its first step found no checkpoint."""
    if not resumed:
        return "not resumed yet: its first step will tell whether it resumes from a checkpoint"
    epoch, step = resumed.get("epoch"), resumed.get("step")
    if (epoch is None or epoch <= 1) and (step is None or step <= 1):
        return "started from scratch (no checkpoint to resume from)"
    where = ", ".join(p for p in (f"epoch {epoch}" if epoch is not None else "",
                                  f"step {step}" if step is not None else "") if p)
    return f"resumed from a checkpoint at {where}"


def restart_lines(snapshot: ClusterSnapshot) -> list[str]:
    """One line per restart: its kind, its cause and whether it resumed from a checkpoint (once known)."""
    history = snapshot.get("restart_history") or []
    if not history:
        return list(snapshot.get("restart_causes") or [])
    lines = []
    for entry in history:
        line = f"{entry.get('kind') or 'restart'}: {entry.get('cause') or ''}"
        line += f"; {resume_text(entry.get('resumed_from'))}"
        lines.append(line)
    return lines


# ---------------------------------------------------------------------------------------------- text


def render_text(snapshot: ClusterSnapshot) -> str:
    """A few lines for ``text/plain``: one per worker; log paths and the error when the run is over."""
    done = snapshot.get("status") in DONE_STATES
    lines = [headline(snapshot)]
    for worker in snapshot.get("workers") or []:
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
        lines.append(f"Error: {_error_line(snapshot)}")
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
    color = STATUS_COLORS.get(status or "", "#6b7280")
    return (
        f'<span class="nbw-status nbw-status-{_esc(status)}" style="color:#fff;background:{color};'
        f'border-radius:8px;padding:0 6px;font-size:0.85em">{_esc(status_label(status))}</span>'
    )


def _row(cells: list[str], tag: str = "td") -> str:
    return "<tr>" + "".join(f"<{tag} {_CELL}>{c}</{tag}>" for c in cells) + "</tr>"


def _worker_rows(snapshot: ClusterSnapshot, with_logs: bool) -> str:
    header = ["worker", "host", "status", "progress", "metrics", "steps/s", "restarts"]
    if with_logs:
        header.append("log")
    rows = [_row([_esc(h) for h in header], "th")]
    for worker in snapshot.get("workers") or []:
        status = _badge(worker.get("status"))
        if exit_text(worker):
            status += f" {_esc(exit_text(worker))}"
        rate = worker.get("steps_per_sec")
        cells = [
            _esc(worker_name(worker)),
            _esc(worker.get("host") or ""),
            status,
            _esc(epoch_text(worker)),
            _esc(format_metrics(worker.get("metrics"))),
            _esc(f"{rate:.1f}" if rate else ""),
            _esc(worker.get("restarts") or 0),
        ]
        if with_logs:
            cells.append(f"<code>{_esc(worker.get('log_path') or '')}</code>")
        rows.append(_row(cells))
    return f'<table class="nbw-workers" {_TABLE}>{"".join(rows)}</table>'


def _error_line(snapshot: ClusterSnapshot) -> str:
    """The run's error; only its first line when a ``RunFailed`` with the whole of it is raised below."""
    error = str(snapshot.get("error") or "")
    return (error.strip().splitlines() or [""])[0] if snapshot.get(ERROR_BELOW_KEY) else error


def _error_html(snapshot: ClusterSnapshot) -> str:
    parts = []
    if snapshot.get("error"):
        parts.append(f'<p style="color:#b91c1c"><b>Error:</b> {_esc(_error_line(snapshot))}</p>')
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
    if snapshot.get("status") in DONE_STATES:
        return render_summary_html(snapshot)
    tails = []
    for worker in snapshot.get("workers") or []:
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
    for worker in snapshot.get("workers") or []:
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
        f"{_worker_rows(snapshot, with_logs=True)}{output}{_error_html(snapshot)}{restarts}"
        f'<p style="font-size:0.85em">Run directory: <code>{_esc(snapshot.get("run_dir") or "")}</code></p></div>'
    )


_failed = failed_workers
