"""`%workers`: the table of this kernel's clusters (one row each: backend, workers, status, each worker's status,
restarts, wall time, isolation, run directory), what its sessions saved, this notebook's earlier runs (a kernel
that restarted: earlier_runs.py), the idle zygotes and nbworkers' version. Imports no TensorFlow."""

from __future__ import annotations

import html
from collections import Counter

from nbworkers.magics.backends.isolation import isolation_fact, isolation_text
from nbworkers.magics.notebook import registry
from nbworkers.magics.notebook.earlier_runs import earlier_lines, earlier_runs
from nbworkers.magics.notebook.session_magic import saved_lines, session_column
from nbworkers.magics.notebook.version_info import listing_footer
from nbworkers.magics.notebook.zygotes_listing import warm_text_html
from nbworkers.magics.shapes import ClusterSnapshot, WorkerSnapshot
from nbworkers.magics.views.words import STATUS_LABELS
from nbworkers.protocol.statuses import ClusterStatus

GROUPED_FROM = 5  # workers from which the per-worker column counts statuses ("16 finished"), not lists them
NAMED_UP_TO = 3  # in a grouped column, a status this few workers have names them: "1 failed (3)"


def _size_column(snap: ClusterSnapshot) -> str:
    """The listing's worker count: an elastic run's ``2/4 (min 2)``."""
    bounds = snap.get("elastic")
    count = len(snap["workers"])
    return f"{count}/{bounds['max']} (min {bounds['min']})" if bounds else str(count)


def _status_column(snap: ClusterSnapshot) -> str:
    """The run's status as recorded, but a run whose kernel is gone reads as every view says it (words.py)."""
    status = snap["status"]
    return STATUS_LABELS[ClusterStatus.LOST] if status == ClusterStatus.LOST else status


def per_worker_column(workers: list[WorkerSnapshot]) -> str:
    """Each worker's status: ``0:running, 1:finished``; from ``GROUPED_FROM`` workers on, counted per status, the
    most common first, a rare one naming its workers: ``15 finished, 1 failed (3)``."""
    roles = any((w.get("role") or "worker") != "worker" for w in workers)
    if len(workers) < GROUPED_FROM:
        return ", ".join(_worker_label(w, roles) + f":{w['status']}" for w in workers)
    counts = Counter(str(w["status"]) for w in workers)
    parts = []
    for status, count in counts.most_common():
        named = [_worker_label(w, roles) for w in workers if w["status"] == status] if count <= NAMED_UP_TO else []
        parts.append(f"{count} {status}" + (f" ({', '.join(named)})" if named and len(counts) > 1 else ""))
    return ", ".join(parts)


def _worker_label(worker: WorkerSnapshot, roles: bool) -> str:
    """The worker's index; with roles (--chief, --ps, --evaluator) also its role: ``0 chief``, ``1 worker0``."""
    if not roles:
        return str(worker["index"])
    role = worker.get("role") or "worker"
    suffix = "" if role in ("chief", "evaluator") else str(worker.get("role_index", 0))
    return f"{worker['index']} {role}{suffix}"


def cluster_table() -> tuple[str, str]:
    """`%workers`'s (text, HTML)."""
    warm_text, warm_html = warm_text_html()
    clusters = registry.all_clusters()
    earlier_text, earlier_html = earlier_lines(earlier_runs(registry.names()))
    if earlier_text:  # this notebook's runs of an earlier kernel (it restarted): named, with how to see them
        warm_text, warm_html = earlier_text + ("\n" + warm_text if warm_text else ""), earlier_html + warm_html
    if not clusters and earlier_text:
        return _with_footer(warm_text, warm_html)
    if not clusters:
        text = "no clusters yet: run a cell with %%worker"
        page = "<p>No clusters yet: run a cell with <code>%%worker</code>.</p>"
        return _with_footer(text + "\n" + warm_text if warm_text else text, page + warm_html)
    rows = []
    for cluster in clusters:
        snap = cluster.snapshot()
        statuses = per_worker_column(snap["workers"])
        rows.append((snap["name"], snap["backend"], _size_column(snap), _status_column(snap) + _session_column(snap),
                     statuses, str(snap["restarts"]), f"{snap['wall_time']:.1f} s",
                     _isolation_column(cluster), snap["run_dir"]))
    header = ("name", "backend", "workers", "status", "per worker", "restarts", "wall time", "isolation", "run dir")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    text = "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in [header] + rows)
    saved = saved_lines([cluster.snapshot() for cluster in clusters])  # what a session can restore
    if saved:
        text += "\n" + "\n".join(saved)
        warm_html = "".join(f"<p>{html.escape(line)}</p>" for line in saved) + warm_html

    cells = lambda row, tag: "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in row)  # noqa: E731
    table = f"<table><tr>{cells(header, 'th')}</tr>" + "".join(f"<tr>{cells(r, 'td')}</tr>" for r in rows) + "</table>"
    return _with_footer(text + "\n" + warm_text if warm_text else text, table + warm_html)


def _with_footer(text: str, page: str) -> tuple[str, str]:
    """The listing ends with nbworkers' version (a user pastes it into a bug report)."""
    footer = listing_footer()
    return f"{text}\n{footer}", f"{page}<p><small>{html.escape(footer)}</small></p>"


def _isolation_column(cluster) -> str:
    """``namespace``, or ``off (why)`` (backends/isolation.py); ``?`` for a run this kernel did not launch."""
    backend = getattr(cluster, "backend", None)
    return "?" if backend is None else isolation_text(isolation_fact(backend))


def _session_column(snapshot: ClusterSnapshot) -> str:
    return session_column(snapshot)
