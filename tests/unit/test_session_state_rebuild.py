"""A session's saved objects put back when a cell rebuilds them (distlib/saved_state/rebuild.py): the names each
cell binds, each object restored once, an optimizer after the model its slots are for. Stand-ins:
tests/saved_state_fakes.py."""

from __future__ import annotations

import numpy as np
import pytest
from saved_state_fakes import (
    KINDS,
    Model,
    Optimizer,
    Variable,
    as_worker,
    fake_checkpoints_on,
    private_run_dir,
    rebuilt_namespace,
    trained_namespace,
)

from nbworkers.distlib.saved_state import namespace as session_state
from nbworkers.distlib.saved_state import rebuild


@pytest.fixture(autouse=True)
def fake_checkpoints(monkeypatch):
    fake_checkpoints_on(monkeypatch)


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    return private_run_dir(tmp_path, monkeypatch)


def test_each_cell_records_the_names_it_bound():
    bindings = rebuild.Bindings()
    namespace: dict = {"a": 1}
    bindings.before(namespace)
    namespace.update(model=Model(), opt=Optimizer())
    assert bindings.after(namespace, 1) == ["model", "opt"]
    bindings.before(namespace)
    namespace["model"].weights.append(Variable(1.0))  # changed in place: not bound again
    namespace["x"], namespace["_hidden"] = 3, 4
    assert bindings.after(namespace, 2) == ["x"]
    bindings.before(namespace)
    namespace["model"] = Model()
    bindings.after(namespace, 3)
    assert bindings.built_in == {"model": 3, "opt": 1, "x": 2}


def test_saved_objects_come_back_when_a_cell_rebuilds_them_once_each(run_dir, monkeypatch, capsys):
    monkeypatch.setattr(session_state, "loaded_kinds", lambda: KINDS)
    session_state.save_namespace(trained_namespace(), run_dir, 1, 0, 2**20, KINDS)
    as_worker(monkeypatch, 0, 2)
    assert rebuild.RestoreOnRebuild({}, str(run_dir), 3).waiting == set()  # not right after the save
    assert rebuild.RestoreOnRebuild({}, str(run_dir), 2, enabled=False).waiting == set()  # turned off
    namespace = rebuilt_namespace()
    rebuilds = rebuild.RestoreOnRebuild(namespace, str(run_dir), 2)
    assert rebuilds.waiting == {"model", "scale", "net", "adam", "loss", "pair"}
    assert rebuilds.restore_rebuilt(["model", "x"]) == {"model": "2 weights + 3 optimizer variables"}
    assert namespace["model"].optimizer.iterations.value == 42.0 and "net" in rebuilds.waiting
    namespace["model"] = Model()
    assert rebuilds.restore_rebuilt(["model"]) == {}  # once: a later rebuild starts afresh
    namespace["scale"] = Variable(np.zeros(4))
    assert rebuilds.restore_rebuilt(["scale"]) == {}
    assert "scale: (variable) ValueError" in capsys.readouterr().err and "scale" not in rebuilds.waiting


def test_a_standalone_optimizer_rebuilt_before_its_model_waits_for_it(run_dir, monkeypatch):
    monkeypatch.setattr(session_state, "loaded_kinds", lambda: KINDS)
    session_state.save_namespace(trained_namespace(), run_dir, 1, 0, 2**20, KINDS)
    as_worker(monkeypatch, 0, 2)
    namespace: dict = {"adam": Optimizer()}
    rebuilds = rebuild.RestoreOnRebuild(namespace, str(run_dir), 2)
    assert rebuilds.needs["adam"] == {"net"} and rebuilds.needs["model"] == set()
    assert rebuilds.restore_rebuilt(["adam"]) == {}  # net is not rebuilt yet: adam waits
    namespace["net"] = Model()
    assert rebuilds.restore_rebuilt(["net"]) == {"net": "2 weights + 1 optimizer variables",
                                                 "adam": "Optimizer, 7 steps taken"}
    assert namespace["adam"].slots[0].value.tolist() == [[0.5] * 3] * 2 and rebuilds.waiting == {
        "model", "scale", "loss", "pair"}
