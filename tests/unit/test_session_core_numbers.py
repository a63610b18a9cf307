"""The session core numbers the user's cells only (magics/sessions/core/cells.py): a cell nbworkers runs itself
(``%workers restore``, label "restore") is called by what it does and uses up no number, so the next user cell is
the next number, in every message. Pure: a fake clock."""

from __future__ import annotations

from session_core_run import MODEL_SAVED, OK, RAISED, Session, concluded

from nbworkers.magics.sessions.core import events as ev
from nbworkers.magics.sessions.summary import session_summary
from nbworkers.protocol.statuses import CellState


def ran(s: Session, label: str = "", prompt: int | None = None) -> int:
    """Submit a cell that ends on every worker; its submitted number."""
    s.submit(label=label, prompt=prompt)
    number = len(s.core.records)
    s.end(number, OK, OK)
    s.tick()
    assert s.state(number) == CellState.FINISHED
    return number


def test_a_restore_is_not_numbered_as_a_user_cell():
    s = Session()
    ran(s), ran(s)
    restore = ran(s, label="restore")
    assert restore == 3 and s.core.record(3).title == "restore" and s.core.record(3).shown is None
    fourth = ran(s)
    assert s.core.record(fourth).title == "cell 3"  # not "cell 4": the restore used up no number
    assert s.core.user_cells == 3 and s.core.live_cells() == "cells 1-3"
    assert session_summary("s", s.core)["cells"] == 3


def test_messages_after_a_restore_name_the_users_numbers():
    s = Session()
    ran(s)
    ran(s, label="restore")
    s.submit(), s.submit()  # the user's cells 2 and 3 (submitted as 3 and 4)
    s.end(3, RAISED, OK)
    actions = s.tick()
    assert concluded(actions) == [(3, CellState.FAILED), (4, CellState.CANCELLED)]
    assert s.core.record(4).error == "not run: cell 2 failed"
    assert "- run: session cell 2 again once it is fixed" in s.core.record(3).error
    assert "the variables of cells 1-2 are kept" in s.core.record(3).error


def test_a_failed_restore_says_to_run_the_restore_again():
    s = Session()
    ran(s)
    s.submit(label="restore")
    s.end(2, RAISED, OK)
    s.tick()
    error = s.core.record(2).error
    assert "- run: `%workers restore s` again once it is fixed" in error and "variables of cell 1 are kept" in error
    s.send(ev.WorkerEnded(0, 2, RAISED))  # stale: the cell ended
    assert s.core.record(2).title == "restore"


def test_a_save_after_a_restore_names_the_users_cells_that_built_what_it_saved():
    s = Session()
    ran(s)
    ran(s, label="restore")
    ran(s)  # the user's cell 2, the workers' cell 3: it builds the model
    built = ev.WorkerSave(saved=MODEL_SAVED.saved, folder=MODEL_SAVED.folder,
                          built_in=(("model", 3), ("step_size", 1)))
    assert s.send(ev.SaveRequested("worker 1 was killed", (0,), on_purpose=False))[-1] == ev.SendSave(3, (0,), 0)
    s.send(ev.StateSaved(0, built))
    s.send(ev.GroupRestarting("worker 1 was killed", on_purpose=False))
    assert s.core.saved is not None
    assert "- run: session cells 1 and 2 (1 built step_size; 2 built model) again" in s.core.lost_note
    assert s.core.saved.summary("s").startswith("s: saved before the restart after cell 2: model")


def test_cells_a_notebook_submitted_are_named_by_the_notebooks_numbers():
    """A notebook's cells carry their execution count (``[N]``): every message names them so, never by the session's
    own count, which the notebook does not show (cells [3] and [5] are the session's 1 and 2)."""
    s = Session()
    ran(s, prompt=3)
    ran(s, label="restore")
    assert s.core.live_cells() == "cell [3]"
    s.submit(prompt=5), s.submit(prompt=6)
    assert s.core.record(3).title == "cell [5]" and s.core.record(3).shown == 2
    s.end(3, RAISED, OK)
    s.tick()
    assert s.core.record(4).error == "not run: cell [5] failed"
    assert "- run: cell [5] again once it is fixed" in s.core.record(3).error
    assert "the variables of cells [3] and [5] are kept" in s.core.record(3).error
    ran(s, prompt=8)  # the workers' cell 5
    assert s.core.live_cells() == "cells [3], [5] and [8]"  # [6] never ran
    built = ev.WorkerSave(saved=MODEL_SAVED.saved, folder=MODEL_SAVED.folder,
                          built_in=(("model", 5), ("step_size", 1)))
    s.send(ev.SaveRequested("worker 1 was killed", (0,), on_purpose=False))
    s.send(ev.StateSaved(0, built))
    s.send(ev.GroupRestarting("worker 1 was killed", on_purpose=False))
    assert "- run: cells [3] and [8] ([3] built step_size; [8] built model) again" in s.core.lost_note
    assert s.core.saved is not None and s.core.saved.summary("s").startswith(
        "s: saved before the restart after cell [8]: model")


def test_many_notebook_cells_read_as_a_range():
    s = Session()
    for prompt in (2, 4, 7, 9):
        ran(s, prompt=prompt)
    assert s.core.live_cells() == "cells [2]-[9]"
