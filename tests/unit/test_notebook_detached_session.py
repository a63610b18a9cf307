"""The kernel's handle on a detached session (magics/notebook/remote/detached_session.py): found by name from its
state.json, its cells, pulls and pushes through the session's channel, served here by a fake session
(test_sessions_detach.py's) over a real Unix socket; no process."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from detach_fakes import FakeSession

from nbworkers.magics.notebook import registry
from nbworkers.magics.notebook.remote.detached_session import DetachedSession, detached_session
from nbworkers.magics.rundir.layout import write_state
from nbworkers.magics.sessions.detach.handlers import handle
from nbworkers.magics.sessions.detach.server import SessionServer
from nbworkers.magics.sessions.pull import PullError
from nbworkers.magics.sessions.push import PushError
from nbworkers.magics.sessions.session import SessionEnded
from nbworkers.magics.settings import settings


def _state(run_dir, **fields):
    write_state(run_dir, {"name": run_dir.name, "status": "running", "kernel_pid": os.getpid(),
                          "started": time.time(), "workers": [{"index": 0, "pid": 11}], **fields})


@pytest.fixture
def served(tmp_path, monkeypatch):
    monkeypatch.setattr(settings(), "run_root", str(tmp_path))
    (tmp_path / "s").mkdir(mode=0o700)
    _state(tmp_path / "s", detached=True, session={"name": "s", "cells": 0, "state": "idle"})
    session = FakeSession()
    server = SessionServer("s", tmp_path / "s", lambda kind, content, blobs: handle(session, kind, content, blobs))
    server.start()
    yield session
    server.close()
    registry._clusters.pop("s", None)


def test_a_live_detached_session_is_found_by_name_and_registered(served, tmp_path):
    handle_ = detached_session("s")
    assert isinstance(handle_, DetachedSession) and registry.get("s") is handle_
    assert detached_session("s") is handle_  # the same handle again
    assert handle_.live_cells() == "cells 1-2" and handle_.state.workers[0].pid == 11


@pytest.mark.parametrize("fields", [{"detached": True}, {"session": {"name": "p"}}])
def test_a_plain_detached_run_or_an_attached_session_is_not_one(tmp_path, monkeypatch, fields):
    monkeypatch.setattr(settings(), "run_root", str(tmp_path))
    (tmp_path / "p").mkdir(mode=0o700)
    _state(tmp_path / "p", **fields)
    assert detached_session("p") is None and detached_session("nothing-here") is None


def test_cells_pulls_and_pushes_go_through_the_channel(served, tmp_path):
    session = DetachedSession(tmp_path / "s")
    cell = session.submit("print(x + 1)")
    assert cell.number == 1 and served.cells[0].code == "print(x + 1)"
    served.cells[0].finish()
    assert cell.wait(timeout=5) and repr(cell.value) == "42"
    assert session.interrupt(cell) == "interrupting" and served.interrupted == [served.cells[0]]
    assert session.pull("x")["w"].shape == (2, 3)
    with pytest.raises(PullError, match="NameError"):
        session.pull("boom")
    assert session.push(workers=[0], a=np.zeros(2)) == [0]
    with pytest.raises(PushError, match="never unpickles"):
        session.push(obj=object(), allow_pickle=True)


def test_an_ended_session_refuses_cells_as_an_attached_one_does(served, tmp_path):
    served.ended = True
    with pytest.raises(SessionEnded, match="start it again"):
        DetachedSession(tmp_path / "s").submit("x")


def test_restore_goes_to_the_sessions_supervisor_and_says_why_when_nothing_was_saved(served, tmp_path):
    from nbworkers.magics.sessions.detach.client import SessionRefused
    from nbworkers.magics.sessions.session import RESTORE_CELL, RESTORE_LABEL

    session = DetachedSession(tmp_path / "s")
    with pytest.raises(SessionRefused, match="saved nothing to restore"):
        session.restore()
    assert served.cells == []
    served.saved = True
    cell = session.restore()
    assert (cell.number, cell.label) == (1, RESTORE_LABEL) and served.cells[0].code == RESTORE_CELL
    assert session.cells == [cell]
