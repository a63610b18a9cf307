"""A session's part of the one snapshot its views, its state.json and the REST API read (no processes)."""

from __future__ import annotations

import sys

from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.rundir import listing
from nbworkers.magics.sessions.session import Session
from nbworkers.magics.settings import WorkerSettings


def _session(tmp_path) -> Session:
    spec = LaunchSpec(code="x = 1", workers=2, name="snap", python=sys.executable, cwd=str(tmp_path))
    return Session(spec, WorkerSettings(run_root=str(tmp_path / "runs")))


def test_a_sessions_state_file_and_rest_row_carry_its_cells(tmp_path):
    session = _session(tmp_path)
    session.submit("x = 1")
    session.submit("x += 1")  # no workers yet: both wait in the queue
    session.run_dir.mkdir(parents=True, mode=0o700)
    session.cluster._loop.write_state()  # what the run loop writes every state_file_interval
    row = listing.describe(session.run_dir)
    assert row is not None and row["session"] is not None
    assert row["session"]["cells"] == 2 and row["session"]["state"] == "busy" and row["session"]["queued"] == 2
    full = listing.describe(session.run_dir, full=True)
    assert full is not None and full["session"] == session.snapshot()["session"]


def test_an_idle_session_shows_no_step_or_rate_of_its_last_cell(tmp_path):
    session = _session(tmp_path)
    worker = session.state.workers[0]
    worker.apply_metrics({"step": 10, "steps_total": 20, "t": 100.0})  # the last cell's progress
    worker.apply_metrics({"step": 20, "steps_total": 20, "t": 102.0})
    assert worker.steps_per_sec == 5.0
    snapshot = session.snapshot()
    assert snapshot["session"]["state"] == "idle"
    assert [(w["step"], w["steps_per_sec"]) for w in snapshot["workers"]] == [(None, None), (None, None)]
    session.run_dir.mkdir(parents=True, mode=0o700)
    session.cluster._loop.write_state()
    row = listing.describe(session.run_dir)
    assert row is not None and row["progress"] is None and row["steps_per_sec"] is None
    assert worker.step == 20  # the run's own record is untouched: only the picture leaves it out
