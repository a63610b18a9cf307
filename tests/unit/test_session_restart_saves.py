"""Every restart path saves (magics/sessions/core/cells.py, restart_save.py, saved_state.py): a worker killed, the
Restart button (the supervisor's held restart: ``SaveRequested``) and the second Stop. Pure: a fake clock."""

from __future__ import annotations

from session_core_run import MODEL_SAVED, OK, READY, TIMINGS, VALUES_SAVED, Session, concluded

from nbworkers.magics.sessions.core import events as ev
from nbworkers.magics.sessions.core.events import InterruptOutcome, WorkerEnd
from nbworkers.protocol.statuses import CellEnd, CellState

KILLED = "worker 1 was killed by SIGKILL"
ABORTED = WorkerEnd(CellEnd.INTERRUPTED, "collective aborted", aborted=True)
HOLDER_1 = ev.WorkerSave(saved=MODEL_SAVED.saved, folder="/runs/s/session-state/gen-1/worker-1")


def idle_after_a_cell(workers: int = 2) -> Session:
    s = Session(workers)
    s.submit()
    s.end(1, *([OK] * workers))
    s.tick()
    assert s.state(1) == CellState.FINISHED
    return s


def test_a_worker_killed_while_idle_the_others_save_then_the_restart_goes_on():
    s = idle_after_a_cell(3)
    assert s.send(ev.SaveRequested(KILLED, (0, 2), on_purpose=False)) == [ev.SendSave(1, (0, 2), holder=0)]
    assert s.submit() == []  # no cell starts while the restart waits for the save
    s.send(ev.StateSaved(0, MODEL_SAVED))
    assert s.send(ev.StateSaved(2, VALUES_SAVED)) == [ev.MarkProgress(2), ev.SaveFinished()]
    actions = s.send(ev.GroupRestarting(KILLED, on_purpose=False))
    assert concluded(actions) == [(2, CellState.CANCELLED)]
    note = s.core.lost_note
    assert "- kept: worker 0 saved model (Keras model" in note
    assert "- worker 1 was gone before the save (killed): its own arrays and values are lost" in note
    assert s.core.saved is not None and s.core.saved.gone == (1,)


def test_worker_0_killed_another_worker_saves_the_models():
    s = idle_after_a_cell()
    assert s.send(ev.SaveRequested("worker 0 was killed", (1,), on_purpose=False)) == [
        ev.SendSave(1, (1,), holder=1)]
    assert s.send(ev.StateSaved(1, HOLDER_1))[-1] == ev.SaveFinished()
    s.send(ev.GroupRestarting("worker 0 was killed", on_purpose=False))
    assert "- kept: worker 1 saved model" in s.core.lost_note
    assert "- worker 0 was gone before the save (killed)" in s.core.lost_note
    assert "worker 0 had not ended" not in s.core.lost_note


def test_a_worker_killed_in_a_cell_the_others_end_it_then_save_and_the_cell_fails():
    s = Session()
    s.submit()
    assert s.send(ev.SaveRequested(KILLED, (0,), on_purpose=False)) == [ev.SendAbort(1, (0,), KILLED)]
    actions = s.send(ev.WorkerEnded(0, 1, ABORTED))
    assert actions[-1] == ev.SendSave(1, (0,), holder=0)
    assert s.send(ev.StateSaved(0, MODEL_SAVED))[-1] == ev.SaveFinished()
    actions = s.send(ev.GroupRestarting(KILLED, on_purpose=False))
    assert concluded(actions) == [(1, CellState.FAILED)]
    assert KILLED in s.core.record(1).error and "worker 0 saved model" in s.core.record(1).error


def test_the_restart_button_saves_and_a_save_that_takes_too_long_is_cut_at_the_wait():
    s = idle_after_a_cell()
    s.send(ev.SaveRequested("restart requested", (0, 1), on_purpose=True))
    s.send(ev.StateSaved(0, MODEL_SAVED))
    assert s.tick(TIMINGS.save_wait - 0.1) == []
    assert s.tick(0.2) == [ev.SaveFinished()]
    s.send(ev.GroupRestarting("restart requested", on_purpose=True))
    assert f"- worker 1 did not answer the save within {TIMINGS.save_wait:g} s" in s.core.lost_note


def test_nothing_to_save_and_a_save_under_way_answer_at_once():
    s = Session()
    assert s.send(ev.SaveRequested(KILLED, (0,), on_purpose=False)) == [ev.SaveFinished()]  # no cell ran
    s = Session()
    s.submit()
    s.end(1, ABORTED, OK)  # the session's own restart: it saves first
    assert s.tick()[-1] == ev.SendSave(1, (0, 1), holder=1)  # worker 1 ended the cell by itself (pick_holder)
    assert s.send(ev.SaveRequested(KILLED, (0,), on_purpose=False)) == []  # the held restart waits for that save
    s.send(ev.StateSaved(0, MODEL_SAVED))
    assert s.send(ev.StateSaved(1, VALUES_SAVED))[-1] == ev.SaveFinished()  # not a second restart


def test_the_worker_that_raised_between_steps_saves_the_models_not_the_one_aborted_inside_a_step():
    """Worker 1 raised while worker 0 waited in the next step's all-reduce: worker 0's abort cut that step short
    (its optimizer's iterations moved, its weights did not), so worker 1's state is the one the training had."""
    s = Session()
    s.submit()
    raised = WorkerEnd(CellEnd.ERROR, "ValueError: boom", "Traceback ...\nValueError: boom\n")
    s.end(1, ABORTED, raised)
    assert s.tick() == [ev.SendSave(1, (0, 1), holder=1)]
    s.send(ev.StateSaved(0, VALUES_SAVED))
    s.send(ev.StateSaved(1, HOLDER_1))
    s.send(ev.GroupRestarting("worker 1 failed ...", on_purpose=True))
    error = s.core.record(1).error
    assert "- kept: worker 1 saved model (Keras model" in error
    assert ("- worker 0 was stopped inside a training step, so worker 1, which ended the cell between steps, saved "
            "the models and variables") in error


def test_the_second_stop_ends_the_cell_on_every_worker_and_saves_before_the_restart():
    s = Session()
    s.submit()
    s.stop()
    outcome, actions = s.stop()
    assert outcome == InterruptOutcome.RESTARTING
    assert actions == [ev.SendAbort(1, (0, 1), "Stop was pressed twice")]
    s.send(ev.WorkerEnded(0, 1, ABORTED))  # the first to end it saves the models and variables
    assert s.actions[-1] == ev.SendSave(1, (0,), holder=0)
    s.send(ev.WorkerEnded(1, 1, ABORTED))
    assert s.actions[-1] == ev.SendSave(1, (1,), holder=0)
    s.send(ev.StateSaved(1, VALUES_SAVED))
    assert s.send(ev.StateSaved(0, MODEL_SAVED))[-1] == ev.RestartLosingState("Stop was pressed twice")
    assert s.tick(group=READY) == []  # the cell does not end on its own while the restart is due
    actions = s.send(ev.GroupRestarting("Stop was pressed twice", on_purpose=True))
    assert concluded(actions) == [(1, CellState.STOPPED)] and "worker 0 saved model" in s.core.record(1).error


def test_a_worker_that_does_not_end_the_cell_after_the_abort_is_not_waited_for_past_the_abort_grace():
    s = Session()
    s.submit()
    s.stop()
    s.stop()  # the second Stop: both are told to end the cell; worker 0 is stuck (it ignores the interrupt)
    s.send(ev.WorkerEnded(1, 1, ABORTED))
    s.send(ev.StateSaved(1, HOLDER_1))
    assert s.tick(TIMINGS.abort_grace - 0.1) == []
    assert s.tick(0.2) == [ev.RestartLosingState("Stop was pressed twice")]  # not the whole save_wait
    s.send(ev.GroupRestarting("Stop was pressed twice", on_purpose=True))
    assert "- worker 0 did not end the cell after the abort (session_abort_grace), so it could not save" in (
        s.core.lost_note)
    assert "- worker 0 had not ended the cell, so worker 1 saved the models and variables in its place" in (
        s.core.lost_note)
