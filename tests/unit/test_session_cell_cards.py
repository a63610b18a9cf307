"""A session cell's worker cards (magics/sessions/cell.py) on a Stop: no kernel, no processes. Workers stop a few
ms apart at the same step; their cards must change together, never one stopped and one running."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from nbworkers.magics.sessions.cell import SessionCell
from nbworkers.magics.sessions.core import CellRecord
from nbworkers.magics.sessions.core.events import WorkerEnd
from nbworkers.protocol.statuses import CellEnd

STOPPED = WorkerEnd(CellEnd.INTERRUPTED, "stopped at step 12", step=12)


def a_cell(workers: int = 2) -> SessionCell:
    procs = [SimpleNamespace(index=i, role="worker", role_index=i, log_path="", pid=100 + i, host="")
             for i in range(workers)]
    session = SimpleNamespace(name="s", state=SimpleNamespace(workers=procs), settings=SimpleNamespace(log_tail_lines=50),
                              _lock=threading.RLock())
    cell = SessionCell(session, CellRecord(1), "x = 1")
    cell.begin()
    return cell


def statuses(cell: SessionCell) -> list[str]:
    return [w.status for w in cell.workers]


def test_stopped_workers_cards_change_together_once_every_worker_stopped():
    cell = a_cell()
    cell.record.ends[0] = STOPPED  # the core records the end before the shell shows it
    cell.worker_ended(0, STOPPED)
    assert statuses(cell) == ["running", "running"]  # held: worker 1 has not stopped yet
    cell.record.ends[1] = STOPPED
    cell.worker_ended(1, STOPPED)
    assert statuses(cell) == ["stopped", "stopped"]
    assert [w.detail for w in cell.workers] == ["stopped at step 12"] * 2


def test_a_held_stop_shows_when_the_cell_concludes_without_the_other_workers_end():
    cell = a_cell()
    cell.record.ends[0] = STOPPED
    cell.worker_ended(0, STOPPED)
    cell.conclude()  # e.g. the processes restart: worker 1 never sent its end
    assert statuses(cell) == ["stopped", "stopped"] and cell.workers[0].detail == "stopped at step 12"


def test_an_error_shows_at_once():
    cell = a_cell()
    raised = WorkerEnd(CellEnd.ERROR, "ValueError: bad batch")
    cell.record.ends[1] = raised
    cell.worker_ended(1, raised)
    assert statuses(cell) == ["running", "failed"]


def a_restored_session_cell(restarts: int = 1) -> SessionCell:
    procs = [SimpleNamespace(index=i, role="worker", role_index=i, log_path="", pid=100 + i, host="", restarts=restarts)
             for i in range(2)]
    state = SimpleNamespace(workers=procs, backend="local", restarts=restarts, generation=restarts, run_dir="/r",
                            kernel_pid=1, kernel_id="k")
    session = SimpleNamespace(name="s", state=state, settings=SimpleNamespace(log_tail_lines=50), cells=[None] * 6,
                              user_cells=5, lock=threading.RLock(), live_cells=lambda: "cells 5",
                              backend=SimpleNamespace(name="local", isolation_fact=lambda: {"mode": "namespace"}))
    from nbworkers.magics.sessions.session import RESTORE_CELL, RESTORE_LABEL
    return SessionCell(session, CellRecord(6, label=RESTORE_LABEL), RESTORE_CELL, label=RESTORE_LABEL)


def test_a_restore_is_titled_restore_not_a_user_cell_and_its_cards_count_the_sessions_restarts():
    snapshot = a_restored_session_cell().snapshot()
    info = snapshot["session"]
    assert info["label"] == "restore" and info["running"] == "restore" and "__import__" not in str(info)
    assert snapshot["name"] == "s restore" and info["cells"] == 5  # the user's cells: the restore is not one
    assert snapshot["isolation"] == {"mode": "namespace"}  # the session's: the cell's widget shows it in its header
    assert snapshot["restarts"] == 1 and [w["restarts"] for w in snapshot["workers"]] == [1, 1]  # header = cards
    assert a_cell().name == "s cell 1"


def test_saved_state_put_back_at_a_cells_end_is_said_in_the_cells_view_not_in_its_log_alone():
    """Issue 43: a cell that builds a model again gets the saved one put back at its end, over its own training; the
    worker's RESTORED line (protocol/session_wire.py) becomes the cell's note, in its widget and its text summary."""
    from nbworkers.magics.views.words import snapshot_note
    from nbworkers.protocol import session_wire

    cell = a_cell()
    cell.feed_log(1, "epoch 1 loss 0.4\n")
    assert cell.restored == ""
    cell.feed_log(0, f"epoch 1 loss 0.4\n{session_wire.RESTORED}model (4 weights + 10 optimizer variables), opt (Adam, "
                     "5 steps taken) (saved in /runs/train/session-state/gen-0)\n")
    assert cell.restored == "model (4 weights + 10 optimizer variables), opt (Adam, 5 steps taken)"
    assert snapshot_note({"session": {"restored": cell.restored}}) == (  # type: ignore[typeddict-item]
        "Saved state put back at the end of this cell, over what its code built: model (4 weights + 10 optimizer "
        "variables), opt (Adam, 5 steps taken).")
