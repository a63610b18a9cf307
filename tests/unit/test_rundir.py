"""The run directory's layout (magics/rundir/layout.py) and a new run's directory (magics/rundir/prepare.py): fast, no
TensorFlow, no kernel."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nbworkers.magics.rundir import layout as rundir
from nbworkers.magics.rundir.prepare import prepare_run_dir


def test_the_layout_names_every_file_of_a_run(tmp_path):
    run_dir = rundir.path_for("blue-otter", tmp_path)
    assert run_dir == tmp_path / "blue-otter"
    assert rundir.log_path(run_dir, 3) == run_dir / "worker-3.log"
    assert rundir.cell_path(run_dir) == run_dir / "cell.py"
    assert rundir.push_path(run_dir) == run_dir / "push.pkl"
    assert rundir.state_path(run_dir) == run_dir / "state.json"
    assert rundir.tensorboard_dir(run_dir) == run_dir / "tensorboard"
    assert rundir.path_for("x", "~/runs") == Path.home() / "runs" / "x"  # the same root attach and the REST API use


def test_a_new_run_dir_is_private_and_holds_cell_push_and_empty_logs(tmp_path):
    run_dir = rundir.path_for("fresh", tmp_path / "runs")
    old = os.umask(0o022)
    try:
        prepare_run_dir(run_dir, "print(1)", b"pushed", [rundir.log_path(run_dir, i) for i in range(2)])
        rundir.request_stop(run_dir)
        rundir.write_state(run_dir, {"status": "running"})
    finally:
        os.umask(old)
    assert os.stat(run_dir).st_mode & 0o777 == 0o700
    modes = {p.name: p.stat().st_mode & 0o777 for p in run_dir.iterdir()}
    assert set(modes) == {"cell.py", "push.pkl", "worker-0.log", "worker-1.log", "stop-requested", "state.json"}
    assert set(modes.values()) == {0o600}, modes
    assert rundir.cell_path(run_dir).read_text() == "print(1)"
    assert rundir.stop_requested(run_dir)
    assert rundir.read_state(run_dir) == {"status": "running"}


def test_state_files_are_read_defensively(tmp_path):
    assert rundir.read_state(tmp_path) is None and rundir.state_mtime(tmp_path) is None
    rundir.state_path(tmp_path).write_text("[1, 2]")
    assert rundir.read_state(tmp_path) is None  # not an object
    rundir.state_path(tmp_path).write_text("{broken")
    assert rundir.read_state(tmp_path) is None
    rundir.write_state(tmp_path, {"status": "finished"})
    assert rundir.read_state(tmp_path) == {"status": "finished"} and rundir.state_mtime(tmp_path) > 0
    assert not list(tmp_path.glob("*.tmp"))


def test_runs_are_found_by_name_inside_the_run_root_only(tmp_path):
    root = tmp_path / "runs"
    for name in ("b-run", "a-run"):
        (root / name).mkdir(parents=True)
        rundir.write_state(root / name, {"status": "finished"})
    (root / "no-state").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    rundir.write_state(outside, {"status": "running"})
    (root / "sneaky").symlink_to(outside)
    assert [p.name for p in rundir.list_run_dirs(root)] == ["a-run", "b-run"]
    assert rundir.run_dir_of("a-run", root) == (root / "a-run").resolve()
    for bad in ("sneaky", "no-state", "../outside", ".hidden", "", "a/b", None):
        with pytest.raises(rundir.RunNotFound):
            rundir.run_dir_of(bad, root)
    assert rundir.list_run_dirs(tmp_path / "missing") == []


def test_logs_and_tails_are_read_from_their_end(tmp_path):
    rundir.write_state(tmp_path, {"workers": [{}, {}]})
    log = rundir.log_path(tmp_path, 1)
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert rundir.read_tail(log, 2) == "line 98\nline 99"
    assert rundir.read_tail(tmp_path / "missing.log", 5) == ""
    assert rundir.read_log(tmp_path, "1", tail=1) == "line 99"
    assert rundir.read_log(tmp_path, 1, tail=0) == ""
    cut = rundir.read_log(tmp_path, 1, max_bytes=20)
    assert cut.splitlines()[-1] == "line 99" and not cut.startswith("ine")  # the cut first line is dropped
    assert rundir.read_log(tmp_path, 0) == ""  # no log yet
    for bad in ("2", "-1", "²", "x"):
        with pytest.raises(rundir.RunNotFound):
            rundir.read_log(tmp_path, bad)


def test_a_restart_request_is_taken_once(tmp_path):
    rundir.request_restart(tmp_path)
    assert rundir.restart_requested(tmp_path)
    assert rundir.take_restart_request(tmp_path) is True
    assert rundir.take_restart_request(tmp_path) is False and not rundir.restart_requested(tmp_path)


def test_a_listing_row_carries_the_chiefs_progress_and_the_live_workers(tmp_path):
    from nbworkers.magics.rundir.listing import describe, progress_of

    assert progress_of([{"epoch": None, "step": None}]) is None
    assert progress_of([{"epoch": 2, "epochs_total": 4, "step": 5, "steps_total": 10}])["fraction"] == 0.375
    assert progress_of([{"step": 30, "steps_total": 120}])["fraction"] == 0.25
    assert progress_of([{"epoch": 1, "epochs_total": 2}])["fraction"] == 0.5
    assert progress_of([{"step": 7}]) == {"epoch": None, "epochs_total": None, "step": 7, "steps_total": None,
                                          "fraction": None}
    assert progress_of([{"step": 1}, {"step": 9}])["step"] == 1  # the first that reported: the chief
    run_dir = tmp_path / "blue-otter"
    run_dir.mkdir()
    workers = [{"index": i, "host": "node-a" if i < 2 else "node-b", "status": s, "step": 3, "steps_total": 6,
                "steps_per_sec": 2.5} for i, s in enumerate(["running", "running", "failed"])]
    state = {"status": "running", "kernel_pid": os.getpid(), "started": time.time() - 5, "backend": "ray",
             "workers": workers, "session": {"name": "blue-otter", "cells": 2, "state": "idle"}}
    rundir.write_state(run_dir, state)
    row = describe(run_dir)
    assert row is not None
    assert row["workers_alive"] == 2 and row["nodes"] == ["node-a", "node-b"] and row["steps_per_sec"] == 2.5
    assert row["progress"] and row["progress"]["fraction"] == 0.5 and row["session"]["cells"] == 2
    assert row["restart_requested"] is False
    rundir.write_state(run_dir, {**state, "status": "stopped"})
    assert describe(run_dir)["workers_alive"] == 0  # an ended run has none, whatever its workers' last words
    workers[0]["steps_per_sec"] = float("nan")
    rundir.write_state(run_dir, {**state, "workers": workers[:1]})
    assert describe(run_dir)["steps_per_sec"] is None  # strict JSON for the browser


def test_a_run_whose_kernel_went_away_ends_stopped_unless_a_worker_had_failed():
    from nbworkers.magics.rundir.leftovers import end_of
    from nbworkers.protocol.statuses import KERNEL_GONE

    running = {"status": "running", "workers": [{"status": "running"}, {"status": "running"}]}
    assert end_of(running) == ("stopped", KERNEL_GONE, "stopped")
    failed = {"status": "restarting", "workers": [{"status": "failed"}, {"status": "running"}]}
    status, why, worker_status = end_of(failed)
    assert status == "failed" and why.endswith(KERNEL_GONE) and "failed" in why and worker_status == "stopped"


def test_a_lost_run_reads_stopped_with_the_reapers_words(tmp_path):
    from nbworkers.magics.rundir.listing import describe
    from nbworkers.magics.views.summary import render_text
    from nbworkers.protocol.statuses import KERNEL_GONE

    run_dir = tmp_path / "gone"
    run_dir.mkdir()
    rundir.write_state(run_dir, {"status": "running", "kernel_pid": 2 ** 22 + 7,
                                 "workers": [{"status": "running"}, {"status": "failed"}]})
    row = describe(run_dir)
    assert row and row["status"] == "lost" and row["error"] == KERNEL_GONE
    # its workers read as the reaper records them, not "running" as the dead kernel left them (%workers attach)
    assert row["worker_status"] == ["stopped", "failed"]
    assert [w["status"] for w in describe(run_dir, full=True)["workers"]] == ["stopped", "failed"]
    text = render_text({**describe(run_dir, full=True), "name": "gone"})
    assert f"Why: {KERNEL_GONE}" in text and "Error" not in text, text


def test_the_runs_reaped_at_load_are_told_in_the_words_every_view_uses():
    from nbworkers.magics.rundir.leftovers import reaped_text
    from nbworkers.protocol.statuses import KERNEL_GONE

    assert reaped_text(["plain"]) == f"run plain {KERNEL_GONE}; `%workers attach plain` shows what it did"
    assert reaped_text(["a", "b"]).startswith("runs a, b stopped because their kernels restarted or died: run the cell")
