"""A failed session cell in the user's words (magics/sessions/core/notes.py through the session core, on a fake clock):
a worker whose collectives were aborted because another raised shows "aborted: worker N failed", not what the abort
made TensorFlow raise in it; two workers that raise the same error are not "interrupted because of it"."""

from __future__ import annotations

from session_core_run import OK, RAISED, TIMINGS, Session

from nbworkers.magics.sessions.core import events as ev
from nbworkers.magics.sessions.core.events import WorkerEnd
from nbworkers.protocol.statuses import CellEnd, CellState

MISMATCH = ("RuntimeError: pybind11::error_already_set: MISMATCH of original and normalized active exception types: "
            "ORIGINAL UnavailableError REPLACED BY KeyboardInterrupt")
# what worker 0 sent when the abort reached it inside an all-reduce (before distlib/worker/session.py said "aborted")
IN_ALL_REDUCE = WorkerEnd(CellEnd.ERROR, MISMATCH, "Traceback (most recent call last):\n  File \"/x/nbworkers/distlib/"
                          "compat/keras3/mwms.py\", line 80, in train_step\n" + MISMATCH, aborted=True, step=7)


def ended_cards(actions: list[ev.Action]) -> dict[int, WorkerEnd]:
    return {a.worker: a.end for a in actions if isinstance(a, ev.CellWorkerEnded)}


def test_a_worker_aborted_in_an_all_reduce_reads_aborted_worker_1_failed_on_its_card_and_in_the_cell():
    s = Session()
    s.submit()
    s.send(ev.WorkerEnded(1, 1, RAISED))
    assert [a.workers for a in s.tick(TIMINGS.peer_grace) if isinstance(a, ev.SendAbort)] == [(0,)]
    card = ended_cards(s.send(ev.WorkerEnded(0, 1, IN_ALL_REDUCE)))[0]
    assert (card.status, card.error, card.traceback, card.aborted) == (
        CellEnd.INTERRUPTED, "aborted: worker 1 failed", "", True)  # its card: stopped, no traceback
    s.send(ev.LogClosed(0, 1)), s.send(ev.LogClosed(1, 1))
    saves = [a for a in s.tick() if isinstance(a, ev.SendSave)]
    assert saves and saves[0].holder == 1  # the restart's save: worker 1 ended between steps
    for worker in (0, 1):
        s.send(ev.StateSaved(worker, ev.WorkerSave()))
    s.send(ev.GroupRestarting("worker 1 failed ...", on_purpose=True))
    cell = s.core.record(1)
    assert cell.state == CellState.FAILED and cell.failed_workers == (1,)
    assert cell.error.startswith("worker 1: ValueError: shapes differ\n- worker 0 was interrupted because of it\n")
    assert "pybind11" not in cell.error and "MISMATCH" not in cell.error and "nbworkers/distlib" not in cell.error


def test_workers_that_raise_the_same_error_failed_the_same_way_and_another_error_is_named():
    same = Session()
    same.submit()
    same.end(1, RAISED, RAISED)
    same.tick()
    cell = same.core.record(1)
    assert cell.failed_workers == (0, 1) and "interrupted" not in cell.error
    assert cell.error.splitlines()[:2] == ["worker 0: ValueError: shapes differ", "- worker 1 failed the same way"]
    other = Session(workers=3)
    other.submit()
    other.end(1, RAISED, OK, WorkerEnd(CellEnd.ERROR, "KeyError: 'x'", "Traceback ...\nKeyError: 'x'"))
    other.tick()
    assert other.core.record(1).error.splitlines()[1] == "- worker 2 failed too: KeyError: 'x'"


def test_an_error_of_the_worker_that_failed_first_is_its_own_even_when_its_collectives_were_aborted():
    s = Session()
    s.submit()  # a second Stop aborts a cell in which worker 0 then raises: no other worker failed first
    end = ended_cards(s.send(ev.WorkerEnded(0, 1, IN_ALL_REDUCE)))[0]
    assert end == IN_ALL_REDUCE
