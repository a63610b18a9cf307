"""A blocking session cell (``--block``) leaves its final summary to its wait: a cell that ends between the magic's
``show()`` and ``wait()`` (a cell that fails at once) is finished once, by the wait, with the error below it, not
also by the loop's ``end()`` without it (the traceback showed twice; magics/sessions/cell.py, run/outputs.Waits).
No processes: a session that never started, a stand-in view."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.sessions.session import Session
from nbworkers.magics.settings import WorkerSettings


def test_a_cell_that_ends_before_its_blocking_wait_is_finished_once_by_the_wait(tmp_path):
    spec = LaunchSpec(code="x = 1", workers=2, name="waits", python=sys.executable, cwd=str(tmp_path))
    session = Session(spec, WorkerSettings(run_root=str(tmp_path / "runs")))
    cell = session.submit("x = 1")
    finished: list[dict] = []
    cell._views.append(SimpleNamespace(finish=finished.append, update=lambda snapshot: None))
    with cell.waited():
        cell.end()  # the loop ends the cell before the notebook's thread waits
        assert finished == []
        assert cell.wait(timeout=1, raise_on_failure=False)
    assert len(finished) == 1
    cell.end()  # an end without a wait coming finishes the views itself
    assert len(finished) == 2
