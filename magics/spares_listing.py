"""The idle warm processes (zygotes, and the spares pool when zygotes are off) as ``%workers`` lists them."""

from __future__ import annotations

from typing import Any

import psutil


def _rss_mb(*pids: int | None) -> float:
    total = 0
    for pid in pids:
        if not pid:
            continue
        try:
            total += psutil.Process(pid).memory_info().rss
        except (psutil.Error, OSError):
            pass
    return total / 2**20


def spare_rows() -> list[dict[str, Any]]:
    """Each live spare of this kernel: its pids, whether it is ready, its age and resident memory (MB).

    Never starts the pool: a kernel that never ran a cell has no spares."""
    from .backends import spares

    pool = getattr(spares, "_pool", None)
    if pool is None:
        return []
    rows = []
    for spare in pool.describe():
        rows.append({**spare, "memory_mb": _rss_mb(spare.get("worker_pid"), spare.get("host_pid"))})
    return rows


def spares_text_html(rows: list[dict[str, Any]]) -> tuple[str, str]:
    """One line (and one HTML paragraph) for the spares; empty strings when there are none."""
    if not rows:
        return "", ""
    import html

    total = sum(r["memory_mb"] for r in rows)
    items = [f"pid {r.get('worker_pid') or r.get('host_pid')} {'ready' if r.get('ready') else 'importing'} "
             f"{r['memory_mb']:.0f} MB, idle {r.get('age', 0):.0f} s" for r in rows]
    text = (f"warm spares (idle, TensorFlow imported, for the next cell): {len(rows)}, {total:.0f} MB: "
            + "; ".join(items) + "  (nbworkers.settings().spares = 0 turns them off)")
    return text, f"<p>{html.escape(text)}</p>"


def zygote_rows() -> list[dict[str, Any]]:
    """Each live zygote of this kernel (TensorFlow imported once, forks the workers): pid, forks, age, memory.

    Never starts one: a kernel that never ran a cell has no zygote."""
    from .backends import zygotes

    pool = getattr(zygotes, "_pool", None)
    if pool is None:
        return []
    return [{**z, "memory_mb": _rss_mb(z.get("pid"))} for z in pool.describe() if z.get("alive")]


def zygotes_text_html(rows: list[dict[str, Any]]) -> tuple[str, str]:
    """One line (and one HTML paragraph) for the zygotes; empty strings when there are none."""
    if not rows:
        return "", ""
    import html

    total = sum(r["memory_mb"] for r in rows)
    items = [f"pid {r['pid']} {r['memory_mb']:.0f} MB, {r.get('forks', 0)} workers forked, up {r.get('age', 0):.0f} s"
             for r in rows]
    text = (f"zygotes (idle, TensorFlow imported once, fork the next cell's workers): {len(rows)}, {total:.0f} MB: "
            + "; ".join(items) + "  (nbworkers.settings().zygote = False turns them off)")
    return text, f"<p>{html.escape(text)}</p>"


def warm_text_html() -> tuple[str, str]:
    """The lines ``%workers`` adds under its table for every idle warm process of this kernel."""
    parts = [zygotes_text_html(zygote_rows()), spares_text_html(spare_rows())]
    return "\n".join(t for t, _ in parts if t), "".join(h for _, h in parts)
