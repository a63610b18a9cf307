"""A live session of plain-Python workers (real processes, no TensorFlow import): state kept across cells,
queued cells, cancel after a failure, and a cell that ignores Stop."""

from __future__ import annotations

import sys
import time

import pytest
from conftest import wait_until


def test_a_plain_python_session_keeps_state_queues_cells_and_cancels_after_a_failure(tmp_path):
    from nbworkers.magics.launch.spec import LaunchSpec
    from nbworkers.magics.sessions.session import Session
    from nbworkers.magics.settings import WorkerSettings

    config = WorkerSettings(run_root=str(tmp_path / "runs"))
    spec = LaunchSpec(code="x = 1", workers=2, name="plain", python=sys.executable, cwd=str(tmp_path))
    session = Session(spec, config).start()
    try:
        cells = [session.submit("x = 1"), session.submit("x += 1\nprint('x', x)"),
                 session.submit("raise RuntimeError('third')"), session.submit("print('never')")]
        assert cells[1].wait(60) and cells[1].state == "finished"
        with pytest.raises(Exception, match="third"):
            cells[2].wait(60)
        assert cells[3].wait(10) and cells[3].state == "cancelled" and "cell 3 failed" in cells[3].error
        assert cells[1].snapshot()["workers"][1]["log_tail"] == ["x 2"]
        assert session.pull("x", worker=1) == 2
        last = session.submit("x * 10")  # the last expression is shown, as IPython's Out
        last.wait(60)
        assert repr(last.value) == "20" and last.snapshot()["workers"][0]["log_tail"] == []  # Out, not a print
        assert session.snapshot()["session"]["state"] == "idle"
        from nbworkers.magics.rundir.listing import describe  # what the REST API and the sidebar read: state.json

        def written() -> dict:
            return (describe(session.run_dir) or {}).get("session") or {}

        # state.json is written as the loop goes: once with the fifth cell running, then idle (under load, apart)
        assert wait_until(lambda: written().get("cells") == 5 and written().get("state") == "idle", 30), written()
        row = describe(session.run_dir)
        assert row is not None and row["session"]["cells"] == 5 and row["session"]["state"] == "idle"
        slow = session.submit("import time\ntime.sleep(60)", timeout=0.5)  # --timeout: interrupted, failed
        with pytest.raises(Exception, match="timed out after 0.5 s"):
            slow.wait(60)
        assert slow.state == "failed" and session.pull("x") == 2  # the session goes on
    finally:
        session.stop()
        session.wait(30)
    assert session.status == "stopped"
    with pytest.raises(Exception, match="stopped"):
        session.submit("x")


STUCK = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)  # as a cell inside a C++ op\nstuck = True\ntime.sleep(600)"


def test_a_cell_that_ignores_stop_restarts_the_processes_and_says_the_state_is_gone(tmp_path):
    from nbworkers.magics.launch.spec import LaunchSpec
    from nbworkers.magics.sessions.session import Session
    from nbworkers.magics.settings import WorkerSettings

    config = WorkerSettings(run_root=str(tmp_path / "runs"), session_pause_wait=0.2,
                            session_interrupt_grace=60.0)
    session = Session(LaunchSpec(code="x = 1", workers=2, name="stuck", python=sys.executable, cwd=str(tmp_path)),
                      config).start()
    try:
        session.submit("kept = 1").wait(60)
        cell = session.submit(STUCK)
        assert wait_for(lambda: cell.state == "running")
        assert session.interrupt() == "interrupting"
        time.sleep(1.0)
        assert cell.state == "running"  # the KeyboardInterrupt cannot reach it
        assert session.interrupt() == "restarting"  # a second Stop
        assert cell.wait(60, raise_on_failure=False) and cell.state == "stopped"
        assert "Stop was pressed twice" in cell.error and "state of cells 1-2 is gone" in cell.error
        assert session.pull("'kept' in globals()") is False and session.restarts == 1
        # the same without a second Stop: after session_interrupt_grace the processes restart by themselves
        config.session_interrupt_grace = 1.0
        again = session.submit(STUCK)
        assert wait_for(lambda: again.state == "running")
        session.interrupt()
        assert again.wait(60, raise_on_failure=False) and again.state == "stopped"
        assert "stuck in a collective" in again.error and "state of cell 3 is gone" in again.error
        assert session.submit("print('fresh')").wait(60) and session.restarts == 2
        # the widget's Restart button on a running cell: the processes restart, the cell counts as stopped
        sleeping = session.submit("import time\ntime.sleep(600)")
        assert wait_for(lambda: sleeping.state == "running")
        sleeping.restart()
        assert sleeping.wait(60, raise_on_failure=False) and sleeping.state == "stopped"
        assert "restart requested" in sleeping.error and wait_for(lambda: session.restarts == 3)
    finally:
        session.stop()
        session.wait(30)


def wait_for(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
