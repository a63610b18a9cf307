"""How the parts of a run's snapshot read in words: status labels and colours, durations, numbers, metrics, worker
names, progress, exit codes, restarts, the headline. Shared by the text/HTML summary (summary.py) and ``%workers``.
Every function takes parts of a ``ClusterSnapshot`` (magics/shapes.py) and never raises on missing fields."""

from __future__ import annotations

import math
import signal
from typing import Any

from nbworkers.magics.shapes import ClusterSnapshot, WorkerSnapshot
from nbworkers.protocol.statuses import ENDED, LOOKS, LOST_LABEL, ClusterStatus, WorkerStatus

# One label and one colour for every status a view shows: the protocol's (LOOKS in protocol/statuses.py), with the
# reason a lost run reads "stopped" said in full (inline colours here: static renderers drop <style>).
STATUS_LABELS: dict[str, str] = {**{status: look.label for status, look in LOOKS.items()},
                                 ClusterStatus.LOST: f"{LOST_LABEL} (its kernel restarted or died)"}
STATUS_COLORS: dict[str, str] = {status: look.colour for status, look in LOOKS.items()}
TRACEBACK_TAIL_LINES = 20


def status_css() -> str:
    """The widget's status colours, from the protocol's (``LOOKS``): one custom property per status on the widget's
    root (``--nbw-status-running``, which widget.css and widget_compact.css use for cards and the compact view's
    cells) and the badge's background (``.nbw-status-running``). Joined after widget.css: a badge's class wins over
    its ``.nbw-badge`` default."""
    names = [(str(status), look.colour) for status, look in LOOKS.items()]
    return "\n".join([".nbw {", *(f"  --nbw-status-{name}: {colour};" for name, colour in names), "}",
                      *(f".nbw-status-{name} {{ background: var(--nbw-status-{name}); }}" for name, _ in names)]) + "\n"


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
    label = "stopped by you" if status == ClusterStatus.STOPPED else status_label(status)
    text = f"nbworkers cluster {snapshot.get('name', '?')}: {label}"
    text += f", {worker_count(snapshot)}"
    verb = "in" if status in ENDED else "for"
    text += f", {verb} {format_duration(snapshot.get('wall_time'))}"
    if snapshot.get("restarts"):
        text += f", {snapshot['restarts']} restart{'s' if snapshot['restarts'] != 1 else ''}"
    return text


def snapshot_note(snapshot: ClusterSnapshot) -> str:
    """What an attached run's summary says while the run goes on in another kernel: it is a snapshot, it will not
    update, and how to see more (``%workers attach`` marks the snapshot ``attached``); a session cell whose end put
    saved state back over what its code built says so (magics/sessions/cell.py); empty otherwise."""
    restored = (snapshot.get("session") or {}).get("restored")
    if restored:
        return f"Saved state put back at the end of this cell, over what its code built: {restored}."
    if not snapshot.get("attached") or snapshot.get("status") in ENDED:
        return ""
    name = snapshot.get("name", "NAME")
    return (f"A snapshot of a run live in another kernel: it will not update. Run `%workers attach {name}` again "
            f"for its state now, or `%workers wait {name}` to wait for its end.")


def worker_count(snapshot: ClusterSnapshot) -> str:
    """``2 workers``; an elastic run's ``2 of 4 workers (elastic, min 2)``."""
    count, bounds = len(snapshot.get("workers") or []), snapshot.get("elastic")
    if bounds:
        return f"{count} of {bounds['max']} workers (elastic, min {bounds['min']})"
    return f"{count} worker{'s' if count != 1 else ''}"


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
        if entry.get("workers"):
            before, after = entry["workers"]
            line += f"; {'shrank' if after < before else 'grew'} from {before} to {after} workers"
        line += f"; {resume_text(entry.get('resumed_from'))}"
        lines.append(line)
    return lines
