"""`%workers` stops advising a restore already done (issue 43): the session's summary line (sessions/summary.py,
core/saved_state.py) leaves out the saved names a rebuilding cell or `%workers restore` got back."""

from __future__ import annotations

from session_core_run import MODEL_SAVED, RAISED, VALUES_SAVED, Session

from nbworkers.magics.sessions.core import events as ev
from nbworkers.magics.sessions.summary import session_summary


def test_the_restore_advice_goes_once_every_saved_model_and_variable_is_back():
    s = Session()
    s.submit()
    s.end(1, RAISED, ev.WorkerEnd(RAISED.status, "x", aborted=True))
    s.tick()
    s.send(ev.StateSaved(0, MODEL_SAVED))
    s.send(ev.StateSaved(1, VALUES_SAVED))
    s.send(ev.GroupRestarting("worker 0 failed ...", on_purpose=True))
    assert session_summary("s", s.core)["saved"].startswith("s: saved before the restart after cell 1: model, "
                                                            "step_size (run ")
    partly = session_summary("s", s.core, put_back={"model"})["saved"]  # a cell rebuilt the model: got it back
    assert partly.startswith("s: saved before the restart after cell 1: step_size (run ") and " model" not in partly
    assert session_summary("s", s.core, put_back={"model", "step_size"})["saved"] == ""  # nothing left to advise
