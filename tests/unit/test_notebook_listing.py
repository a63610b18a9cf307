"""`%workers` (magics/notebook/listing.py, earlier_runs.py): a restarted kernel names this notebook's earlier runs from
their state files, and many workers' statuses are counted, not spelled out one by one."""

from __future__ import annotations

import json

from nbworkers.magics.notebook import listing
from nbworkers.magics.notebook.earlier_runs import earlier_lines, earlier_runs
from nbworkers.magics.notebook.listing import per_worker_column

NOTEBOOK = "/home/me/work/train.ipynb"


def write_run(root, name: str, notebook: str, status: str = "finished", **extra) -> None:
    run_dir = root / name
    run_dir.mkdir(mode=0o700)
    state = {"status": status, "workers": [{"index": 0, "status": status}], "notebook": notebook,
             "kernel_pid": 0, "started": {"plain": 3.0, "held": 2.0}.get(name, 1.0), **extra}
    (run_dir / "state.json").write_text(json.dumps(state))


def test_a_restarted_kernel_names_this_notebooks_earlier_runs_and_how_to_see_them(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    root.mkdir(mode=0o700)
    write_run(root, "plain", NOTEBOOK, "stopped")
    write_run(root, "held", NOTEBOOK, detached=True)
    write_run(root, "elsewhere", "/home/me/work/other.ipynb")
    rows = earlier_runs(set(), NOTEBOOK, str(root))
    assert [row["name"] for row in rows] == ["plain", "held"]  # newest first; another notebook's run is not this one's
    assert earlier_lines(rows[:1])[0] == "earlier in this notebook: plain (stopped) — `%workers attach plain`"
    text, page = earlier_lines(rows)
    assert text.splitlines() == ["earlier in this notebook:", "  plain (stopped) — `%workers attach plain`",
                                 "  held (finished, detached) — `%workers attach held`"]
    assert "<code>%workers attach held</code>" in page
    assert [row["name"] for row in earlier_runs({"plain"}, NOTEBOOK, str(root))] == ["held"]  # this kernel holds it
    assert earlier_runs(set(), "", str(root)) == []  # a kernel that was not told its notebook
    # %workers in the restarted kernel: no cluster of its own yet, the earlier runs instead of "no clusters yet"
    from nbworkers.magics.settings import settings

    monkeypatch.setattr(settings(), "run_root", str(root))
    monkeypatch.setenv("JPY_SESSION_NAME", NOTEBOOK)
    monkeypatch.setattr(listing.registry, "all_clusters", lambda: [])
    monkeypatch.setattr(listing.registry, "names", lambda: set())
    text, page = listing.cluster_table()
    assert text.startswith("earlier in this notebook:\n  plain (stopped)") and "no clusters yet" not in text
    assert "earlier in this notebook" in page


def test_sixteen_workers_statuses_are_counted_a_rare_one_named():
    def workers(*statuses):
        return [{"index": i, "status": s} for i, s in enumerate(statuses)]

    assert per_worker_column(workers("running", "finished")) == "0:running, 1:finished"
    assert per_worker_column(workers(*["finished"] * 16)) == "16 finished"
    assert per_worker_column(workers(*["finished"] * 3, "failed", *["finished"] * 12)) == "15 finished, 1 failed (3)"
    many = workers(*["running"] * 8, *["stopped"] * 8)
    assert per_worker_column(many) == "8 running, 8 stopped"
