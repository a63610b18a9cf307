"""The kernel's idle zygotes (TensorFlow imported once, fork the workers) as ``%workers`` lists them."""

from __future__ import annotations

from typing import Any

import psutil

from nbworkers.magics.backends import zygotes


def _rss_mb(pid: int | None) -> float:
    if not pid:
        return 0.0
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except (psutil.Error, OSError):
        return 0.0


def zygote_rows() -> list[dict[str, Any]]:
    """Each live zygote of this kernel (TensorFlow imported once, forks the workers): pid, forks, age, memory.

    Never starts one: a kernel that never ran a cell has no zygote."""
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
    """The line ``%workers`` adds under its table for this kernel's zygotes (empty strings when none)."""
    return zygotes_text_html(zygote_rows())
