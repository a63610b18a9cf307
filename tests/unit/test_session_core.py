"""The session core (magics/sessions/core/cells.py) driven by events on a fake clock: no kernel, no processes, no
sockets, no TensorFlow. Each test walks one path of a cell's lifecycle and checks the actions and the cells' states."""

from __future__ import annotations

from dataclasses import replace

import pytest
from session_core_run import (
    ABORTED,
    CONNECTING,
    INTERRUPTED,
    MODEL_SAVED,
    OK,
    RAISED,
    READY,
    RESTARTING,
    STOPPING,
    TIMINGS,
    VALUES_SAVED,
    Session,
    concluded,
    kinds,
)

from nbworkers.magics.sessions.core import events as ev
from nbworkers.magics.sessions.core.events import InterruptOutcome, WorkerEnd
from nbworkers.protocol.statuses import CellEnd, CellState, ClusterStatus


def test_cells_queue_and_run_one_at_a_time_once_every_worker_is_ready():
    s = Session()
    assert s.submit(group=CONNECTING) == [] and s.submit(group=CONNECTING) == []
    assert s.tick(group=CONNECTING) == [] and s.core.busy
    assert s.tick() == [ev.Dispatch(1), ev.MarkProgress()]
    assert s.state(1) == CellState.RUNNING and s.state(2) == CellState.QUEUED and s.core.current == 1
    assert s.tick() == []  # cell 2 waits for cell 1
    s.end(1, OK, OK)
    actions = s.tick()
    assert concluded(actions) == [(1, CellState.FINISHED)] and actions[-2:] == [ev.Dispatch(2), ev.MarkProgress()]
    s.end(2, OK, OK)
    assert concluded(s.tick()) == [(2, CellState.FINISHED)] and not s.core.busy


def test_an_idle_session_starts_a_submitted_cell_at_once():
    s = Session()
    assert kinds(s.submit()) == ["Dispatch", "MarkProgress"]


def test_a_cell_waits_for_its_end_markers_a_moment_then_ends_anyway():
    s = Session()
    s.submit()
    s.end(1, OK, OK, close_logs=False)
    assert s.tick(0.5) == []  # the last output may still be on its way
    assert concluded(s.tick(0.6)) == [(1, CellState.FINISHED)]


def test_a_failed_cell_cancels_the_queued_ones_and_says_which_worker_raised():
    s = Session()
    s.submit(), s.submit(), s.submit()
    s.end(1, RAISED, INTERRUPTED)
    actions = s.tick()
    assert concluded(actions) == [(1, CellState.FAILED), (2, CellState.CANCELLED), (3, CellState.CANCELLED)]
    cell = s.core.record(1)
    assert cell.failed_workers == (0,) and cell.error.startswith("worker 0: ValueError: shapes differ\n- ")
    # a short list, then the traceback once, last; no process restarted: nothing was lost
    assert cell.error.splitlines()[1:4] == [
        "- worker 1 was interrupted because of it",
        "- nothing was lost: no process restarted, the variables of cell 1 are kept",
        "- run: session cell 1 again once it is fixed"]
    assert cell.error.splitlines()[4].startswith("Traceback") and cell.error.count("Traceback") == 1
    assert s.core.record(2).error == "not run: cell 1 failed" and "Dispatch" not in kinds(actions)


def test_cell_messages_for_a_cell_that_does_not_run_are_stale():
    s = Session()
    s.submit()
    assert s.send(ev.WorkerEnded(0, 7, OK)) == [ev.DropStale("cell 7 message from worker 0")]
    assert kinds(s.send(ev.Paused(1, 2, 3))) == ["DropStale"] and kinds(s.send(ev.Began(0, 9))) == ["DropStale"]
    assert s.send(ev.Began(0, 1)) == [ev.MarkProgress(0)]
    with pytest.raises(ValueError, match="cell 5 submitted after 1 cells"):
        s.send(ev.Submitted(5, None, READY))


# ----------------------------------------------------------------------------------------------- peer grace and abort
def test_one_workers_error_gives_the_others_the_peer_grace_then_aborts_their_collectives():
    s = Session()
    s.submit()
    s.send(ev.WorkerEnded(0, 1, RAISED))
    assert s.tick(1.9) == []  # an error in code every worker runs ends everywhere: give them time
    assert s.tick(0.2) == [ev.SendAbort(1, (1,), "worker 0 of session 's' failed in cell 1")]
    assert s.tick(1.0) == []  # the abort is sent once
    s.end(1, RAISED, ABORTED)  # worker 1 was in a collective: aborted, the processes cannot use it again
    assert s.tick() == [ev.SendSave(1, (0, 1))]  # first the workers save their namespaces
    assert s.tick(1.0) == [] and s.state(1) == CellState.RUNNING  # the restart waits for their answers
    s.send(ev.StateSaved(0, ev.WorkerSave()))
    actions = s.send(ev.StateSaved(1, ev.WorkerSave()))
    assert actions == [ev.MarkProgress(1), ev.RestartLosingState("worker 0 failed while worker 1 waited in a "
                                                                 "collective, which had to be aborted")]
    assert s.tick() == [] and s.state(1) == CellState.RUNNING  # asked once; the cell ends with the restart
    actions = s.send(ev.GroupRestarting("worker 0 failed ...", on_purpose=True))
    cell = s.core.record(1)
    assert concluded(actions) == [(1, CellState.FAILED)] and cell.failed_workers == (0,)
    assert cell.error.startswith("worker 0: ValueError") and "the state of cell 1 is gone" in cell.error


def test_a_worker_that_does_not_end_after_the_abort_restarts_the_processes():
    s = Session()
    s.submit()
    s.send(ev.WorkerEnded(0, 1, RAISED))
    assert kinds(s.tick(2.0)) == ["SendAbort"]
    assert s.tick(4.9) == []
    assert s.tick(0.2) == [ev.SendSave(1, (0,))]  # only worker 0 ended the cell: only it can save
    assert s.send(ev.StateSaved(0, ev.WorkerSave()))[-1] == ev.RestartLosingState(
        "worker 1 did not end cell 1 after an abort")


# ----------------------------------------------------------------------------------------------- interrupt (Stop)
def test_stop_pauses_every_worker_then_all_stop_at_the_same_step():
    s = Session()
    s.submit()
    outcome, actions = s.stop()
    assert outcome == InterruptOutcome.INTERRUPTING and actions == [ev.SendPause(1, (0, 1))]
    s.send(ev.Paused(0, 1, 7))
    assert s.tick() == []  # worker 1 may still pause
    s.send(ev.Paused(1, 1, 6))
    assert s.tick() == [ev.SendResume(1, (0, 1), 7)]
    s.end(1, WorkerEnd(CellEnd.INTERRUPTED, "stopped at step 41", step=41),
          WorkerEnd(CellEnd.INTERRUPTED, "stopped at step 41", step=41))
    assert concluded(s.tick()) == [(1, CellState.STOPPED)]
    assert s.core.record(1).error == "stopped by you at step 41"  # a stop, not a crash: no traceback


def test_a_stop_of_a_cell_that_never_reported_a_step_says_so_without_one():
    s = Session()
    s.submit()
    s.stop()
    s.end(1, INTERRUPTED, INTERRUPTED)
    assert concluded(s.tick()) == [(1, CellState.STOPPED)]
    assert s.core.record(1).error == "stopped by you"


def test_a_worker_that_did_not_pause_is_in_the_next_collective_so_all_stop_one_step_later():
    s = Session()
    s.submit()
    s.stop()
    s.send(ev.Paused(0, 1, 7))
    assert s.tick(0.5) == []
    assert s.tick(0.6) == [ev.SendResume(1, (0, 1), 8)]


def test_a_cell_that_never_reports_gets_a_plain_keyboard_interrupt():
    s = Session()
    s.submit()
    s.stop()
    assert s.tick(1.1) == [ev.SendInterrupt(1, (0, 1))]
    assert s.tick(1.0) == []


def test_workers_inside_long_steps_are_waited_for_not_interrupted():
    """A worker inside a step says ``pausing``: no plain KeyboardInterrupt (it would stop one worker
    between steps while another waits in the next step's collective); the first to pause sets the step."""
    s = Session()
    s.submit()
    s.stop()
    s.send(ev.Pausing(0, 1)), s.send(ev.Pausing(1, 1))
    assert s.tick(1.1) == [] and s.tick(3.0) == []  # steps longer than the pause wait
    s.send(ev.Paused(1, 1, 12))
    assert s.tick() == [ev.SendResume(1, (0, 1), 13)]  # worker 0 may be in step 13's collective already


def test_pausing_from_another_cell_is_stale():
    s = Session()
    s.submit()
    assert kinds(s.send(ev.Pausing(0, 2))) == ["DropStale"]
    s.stop()
    assert s.tick(1.1) == [ev.SendInterrupt(1, (0, 1))]  # the stale word does not hold back the plain interrupt


def test_a_cell_still_running_after_the_interrupt_grace_restarts_the_processes():
    s = Session()
    s.submit(), s.submit()
    s.stop()
    s.tick(1.1)
    assert s.tick(8.0) == []
    reason = "workers 0, 1 did not end cell 1 10 s after Stop (stuck in a collective)"
    assert s.tick(1.0) == [ev.RestartLosingState(reason)]
    assert s.tick() == []  # no second request, and cell 2 is not sent while the processes restart
    actions = s.send(ev.GroupRestarting(reason, on_purpose=True))
    assert concluded(actions) == [(1, CellState.STOPPED), (2, CellState.CANCELLED)]
    assert actions[-1] == ev.FailPulls(f"not answered: {s.core.lost_note}") and s.core.alive_from == 3
    assert "stuck in a collective" in s.core.lost_note and "the state of cell 1 is gone" in s.core.lost_note


def test_a_second_stop_restarts_the_processes_and_says_which_cells_state_is_gone():
    s = Session()
    s.submit()
    s.end(1, OK, OK)
    s.tick()
    s.submit()
    s.stop()
    outcome, actions = s.stop()
    assert outcome == InterruptOutcome.RESTARTING  # first the workers end the cell (abort) to save (they never do)
    assert actions == [ev.SendAbort(2, (0, 1), "Stop was pressed twice")]
    assert s.tick(TIMINGS.save_wait) == [ev.RestartLosingState("Stop was pressed twice")]
    actions = s.send(ev.GroupRestarting("Stop was pressed twice", on_purpose=True))
    assert concluded(actions) == [(2, CellState.STOPPED)]
    assert "Stop was pressed twice" in s.core.record(2).error and "state of cells 1-2 is gone" in s.core.lost_note
    s.submit(group=CONNECTING)  # the new processes are connecting
    assert s.tick(group=READY) == [ev.Dispatch(3), ev.MarkProgress()]
    s.send(ev.GroupRestarting("worker 1 crashed", on_purpose=False))
    assert s.state(3) == CellState.FAILED and "state of cell 3 is gone" in s.core.lost_note  # not cells 1-3


def test_stop_of_a_queued_cell_cancels_it_and_other_stops_say_what_they_did():
    s = Session()
    assert s.stop() == (InterruptOutcome.IDLE, [])
    s.submit(), s.submit()
    outcome, actions = s.stop(2)
    assert outcome == InterruptOutcome.CANCELLED and concluded(actions) == [(2, CellState.CANCELLED)]
    assert s.core.record(2).error == "cancelled before it ran (Stop)"
    assert s.stop(2) == (InterruptOutcome.NOT_RUNNING, [])
    assert s.state(1) == CellState.RUNNING


def test_a_cell_past_its_timeout_is_interrupted_and_counts_as_failed():
    s = Session()
    s.submit(timeout=3.0)
    assert s.tick(2.9) == []
    assert s.tick(0.2) == [ev.SendPause(1, (0, 1))]
    s.end(1, INTERRUPTED, INTERRUPTED)
    assert concluded(s.tick()) == [(1, CellState.FAILED)]
    assert s.core.record(1).error == "timed out after 3 s (--timeout)"


def test_collectives_aborted_while_stopping_end_the_cell_and_restart_the_processes():
    s = Session()
    s.submit()
    s.stop()
    s.end(1, INTERRUPTED, ABORTED)
    actions = s.tick()
    assert concluded(actions) == [(1, CellState.STOPPED)]
    assert actions[-1] == ev.SendSave(1, (0, 1))  # the cell ended; its workers save before the restart
    assert s.submit() == []  # not sent while the processes restart
    assert s.tick(TIMINGS.save_wait) == [ev.RestartLosingState("collectives were aborted while stopping the cell")]


# ----------------------------------------------------------------------------------------------- the group's fate
def test_no_restart_is_asked_while_the_group_restarts_or_stops():
    s = Session()
    s.submit()
    s.stop()
    assert s.stop(group=STOPPING) == (InterruptOutcome.RESTARTING, [])
    assert s.stop(group=RESTARTING) == (InterruptOutcome.RESTARTING, [])
    assert s.tick(20.0, group=STOPPING) == [ev.SendInterrupt(1, (0, 1))]  # the grace ran out: no restart
    assert s.state(1) == CellState.RUNNING


def test_the_restart_button_stops_the_running_cell_and_a_crash_fails_it():
    s = Session()
    s.submit(), s.submit()
    actions = s.send(ev.GroupRestarting("restart requested", on_purpose=True))
    assert concluded(actions) == [(1, CellState.STOPPED), (2, CellState.CANCELLED)]
    assert s.core.record(2).error.startswith("not run: the session's processes restart (restart requested)")
    s.submit()
    s.send(ev.GroupRestarting("worker 0 was killed", on_purpose=False))
    assert s.state(3) == CellState.FAILED


def test_a_failed_session_and_its_end_conclude_what_is_left():
    s = Session()
    s.submit(), s.submit()
    actions = s.send(ev.GroupFailed("worker 1 exited with code 3."))
    assert concluded(actions) == [(1, CellState.FAILED), (2, CellState.CANCELLED)]
    assert s.core.record(1).error == "the session failed: worker 1 exited with code 3."
    assert s.core.record(2).error == "not run: cell 1 failed"  # the failed cell cancels the queue first
    stopped = Session()
    stopped.submit(), stopped.submit()
    actions = stopped.send(ev.SessionEnded(ClusterStatus.STOPPED))
    assert concluded(actions) == [(1, CellState.STOPPED), (2, CellState.CANCELLED)]
    assert stopped.core.record(2).error == "the session ended (stopped)"
    assert stopped.send(ev.SessionEnded(ClusterStatus.STOPPED)) == []  # nothing left to end


def test_live_cells_names_what_a_restart_would_lose_and_starts_again_after_one():
    s = Session()
    assert s.core.live_cells() == "no cell"
    s.submit()
    assert s.core.live_cells() == "cell 1"
    s.end(1, OK, OK)
    s.tick(1.0)
    s.submit()
    s.submit()  # queued behind cell 2: not run, so nothing of it to lose
    assert s.core.live_cells() == "cells 1-2"
    s.send(ev.GroupRestarting("the Restart button", on_purpose=True))
    assert "the state of cells 1-2 is gone" in s.core.lost_note and s.core.live_cells() == "no cell"


def test_the_restart_button_asks_first_only_when_there_is_state_to_save():
    from nbworkers.magics.views.session_widget import restart_confirm

    assert restart_confirm({"live_cells": "no cell"}) == {} and restart_confirm({}) == {}
    confirm = restart_confirm({"live_cells": "cells 1-8"})
    assert confirm["label"] == "Confirm restart (state of cells 1-8 is saved first)"
    assert confirm["title"].startswith("Restart the session's processes: the workers save the state of cells 1-8")


def test_the_notice_after_a_restart_says_what_the_save_kept_or_that_nothing_was():
    from nbworkers.magics.views.session_widget import restarted_notice

    note = ("the session's processes restart (restart requested): the state of cell 1 is gone from them\n"
            "- kept: back by themselves in the new processes (each worker its own): value\n- saved in /runs/s/saved")
    assert restarted_notice("cell 1", note) == ("restarted the session: kept: back by themselves in the new "
                                                "processes (each worker its own): value; saved in /runs/s/saved")
    assert restarted_notice("cell 1", "the state of cell 1 is gone") == "restarted the session: state of cell 1 lost"


# ----------------------------------------------------------------------------------------------- save before a restart
def failed_with_abort(s: Session) -> None:
    s.submit()
    s.end(1, RAISED, ABORTED)
    assert s.tick() == [ev.SendSave(1, (0, 1))]


def test_the_failed_cell_says_what_was_saved_and_the_one_command_that_restores_it():
    s = Session()
    failed_with_abort(s)
    s.send(ev.StateSaved(0, MODEL_SAVED))
    assert kinds(s.send(ev.StateSaved(1, VALUES_SAVED))) == ["MarkProgress", "RestartLosingState"]
    s.send(ev.GroupRestarting("worker 0 failed ...", on_purpose=True))
    error = s.core.record(1).error
    assert error.startswith("worker 0: ValueError") and "the state of cell 1 is gone from them" in error
    lines = error.splitlines()
    assert lines[1].startswith("- worker 1 was interrupted") and lines[2].startswith("- lost: the session's processes")
    assert lines[3] == ("- kept: worker 0 saved model (Keras model: 4 weights + 9 optimizer variables, 0.0 MiB), "
                        "step_size (variable: float32 ())")
    assert lines[4] == "- kept: back by themselves in the new processes (each worker its own): x, built_in_cell"
    assert lines[5] == ("- run: the cells that build model, step_size again, to get them back (each saved object is "
                        "put back as soon as a cell builds it again, unless NBWORKERS_RESTORE_ON_REBUILD=0); or after "
                        "them `%workers restore s`")
    assert lines[6] == "- not saved (not a kind nbworkers saves, or as said): dataset (a _RepeatDataset)"
    assert lines[7] == "- saved in /runs/s/session-state/gen-1" and lines[8].startswith("Traceback")
    assert error.count("Traceback") == 1
    assert s.core.saved is not None and s.core.saved.summary("s") == (
        "s: saved before the restart after cell 1: model, step_size (run the cells that build model, step_size "
        "again; or after them `%workers restore s`); put back by themselves: x, built_in_cell")


def test_the_failed_cell_names_the_cells_that_built_what_was_saved():
    s = Session()
    failed_with_abort(s)
    s.send(ev.StateSaved(0, replace(MODEL_SAVED, built_in=(("model", 1), ("step_size", 1), ("x", 2)))))
    s.send(ev.StateSaved(1, VALUES_SAVED))
    s.send(ev.GroupRestarting("worker 0 failed ...", on_purpose=True))
    assert "- run: session cell 1 (it built model, step_size) again, to get them back" in s.core.lost_note
    saved = s.core.saved
    assert saved is not None
    saved.reports[0] = replace(MODEL_SAVED, saved=MODEL_SAVED.saved + (("opt", "checkpoint", "Adam: 10 variables"),),
                               built_in=(("model", 1), ("opt", 3)))
    assert saved.cells_to_run() == "session cells 1 and 3 (1 built model; 3 built opt) and the cells that build step_size"
    assert "opt (Adam: 10 variables)" in saved.note("s") and "after them `%workers restore s`" in saved.note("s")


def test_a_worker_that_does_not_answer_the_save_is_waited_for_at_most_save_wait():
    s = Session()
    failed_with_abort(s)
    s.send(ev.StateSaved(1, VALUES_SAVED))
    assert s.tick(TIMINGS.save_wait - 0.1) == []
    assert kinds(s.tick(0.2)) == ["RestartLosingState"]
    s.send(ev.GroupRestarting("worker 0 failed ...", on_purpose=True))
    assert "- worker 0 did not answer the save within 120 s: its state is gone" in s.core.lost_note
    assert "x, built_in_cell" in s.core.lost_note and "%workers restore" not in s.core.lost_note


def test_a_worker_that_could_not_save_says_why_and_late_or_unasked_answers_are_stale():
    s = Session()
    assert kinds(s.send(ev.StateSaved(0, MODEL_SAVED))) == ["DropStale"]  # no save was asked
    failed_with_abort(s)
    s.send(ev.StateSaved(0, ev.WorkerSave(error="OSError: [Errno 28] No space left on device")))
    assert kinds(s.send(ev.StateSaved(0, MODEL_SAVED))) == ["DropStale"]  # answered already
    s.send(ev.StateSaved(1, ev.WorkerSave()))
    s.send(ev.GroupRestarting("worker 0 failed ...", on_purpose=True))
    assert "- worker 0 could not save: OSError: [Errno 28] No space left on device" in s.core.lost_note


def test_a_crash_during_the_save_restarts_without_a_saved_note_and_stuck_workers_are_not_asked():
    s = Session()
    failed_with_abort(s)
    s.send(ev.StateSaved(0, MODEL_SAVED))
    s.send(ev.GroupRestarting("worker 1 was killed", on_purpose=False))  # before worker 1 answered
    assert "- worker 1 did not answer the save" in s.core.lost_note and s.core.saved is not None
    assert s.send(ev.StateSaved(1, VALUES_SAVED)) == [ev.DropStale("saved message from worker 1, no save asked of it")]
    stuck = Session()
    stuck.submit()
    stuck.send(ev.WorkerEnded(1, 1, RAISED))
    stuck.tick(TIMINGS.peer_grace)
    assert stuck.tick(TIMINGS.abort_grace) == [ev.SendSave(1, (1,), holder=1)]  # worker 0 is still in the cell
    stuck.send(ev.StateSaved(1, VALUES_SAVED))
    stuck.send(ev.GroupRestarting("worker 0 did not end ...", on_purpose=True))
    assert "- worker 0 had not ended the cell, so worker 1 saved the models" in stuck.core.lost_note
