"""A session's state saved before its processes restart, and put back (distlib/saved_state/namespace.py,
distlib/saved_state/objects.py) with stand-ins for Keras models and TensorFlow variables: no TensorFlow, no process.
What is picked from a namespace, the private files it goes to, the values that come back by themselves, the restore
into rebuilt objects and its errors, and the ``saved`` message's checks. With real workers:
tests/integration/test_sessions.py (an error on one worker while the other waits in a collective)."""

from __future__ import annotations

import json
import os
import stat
import types

import numpy as np
import pytest

from nbworkers.distlib.saved_state import namespace as session_state
from nbworkers.distlib.saved_state.namespace import Kinds, NoSavedState, StateNotRestored
from nbworkers.protocol import env_settings, session_wire
from nbworkers.protocol.private.dirs import UnsafeDirectory


class Variable:
    """A variable: numpy(), assign(), shape (as tf.Variable and keras.Variable)."""

    def __init__(self, value):
        self.value = np.array(value, dtype="float32")

    @property
    def shape(self):
        return self.value.shape

    def numpy(self):
        return self.value.copy()

    def assign(self, value):
        assert np.shape(value) == self.value.shape
        self.value = np.array(value, dtype="float32")


class Optimizer:
    """Slots made by build(), as Keras optimizers make them on the first step."""

    def __init__(self):
        self.iterations = Variable(0.0)
        self.slots: list[Variable] = []

    @property
    def variables(self):
        return [self.iterations, *self.slots]

    def build(self, variables):
        self.slots = [Variable(np.zeros(v.shape)) for v in variables]


class Model:
    def __init__(self, units: int = 3, seed: float = 0.0):
        self.weights = [Variable(np.full((2, units), seed)), Variable(np.full((units,), seed))]
        self.trainable_variables = self.weights
        self.optimizer = Optimizer()


class Module:
    """Stands for a tf.Module / tf.train.Checkpoint (saved through TensorFlow: not in these tests)."""


KINDS = Kinds(models=(Model,), variables=(Variable,), checkpointables=(Module,))


def trained_namespace() -> dict:
    model = Model(seed=1.5)
    model.optimizer.build(model.trainable_variables)
    model.optimizer.iterations.assign(42.0)
    for slot in model.optimizer.slots:
        slot.assign(np.full(slot.shape, 0.25))
    return {"np": np, "helper": lambda: 1, "Model": Model, "_hidden": 3, "model": model, "scale": Variable(2.0),
            "x": np.arange(6, dtype="float32").reshape(3, 2), "epochs": 7, "config": {"lr": 0.01, "tags": ["a"]},
            "shape": (2, 3), "objects": np.array([object()]), "history": object(), "rate": np.float32(0.5)}


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    folder = tmp_path / "train"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv(env_settings.RUN_DIR.name, str(folder))
    return folder


def as_worker(monkeypatch, worker: int, generation: int) -> None:
    monkeypatch.setenv(env_settings.WORKER.name, str(worker))
    monkeypatch.setenv(env_settings.GENERATION.name, str(generation))


def test_a_namespace_is_sorted_into_what_is_saved_and_what_is_left_out_and_why():
    namespace = trained_namespace()
    plan = session_state.plan_save(namespace, KINDS, worker=0, max_bytes=2**20)
    assert plan.entries == [("model", "model"), ("scale", "variable"), ("x", "array"), ("epochs", "value"),
                            ("config", "value"), ("rate", "array")]
    assert [name for name, _ in plan.skipped] == ["shape", "objects", "history"]  # code and _names: not listed
    assert dict(plan.skipped)["shape"] == "a tuple"
    other = session_state.plan_save(namespace, KINDS, worker=1, max_bytes=2**20)
    assert [n for n, _ in other.entries] == ["x", "epochs", "config", "rate"]  # models and variables: worker 0's
    small = session_state.plan_save({"big": np.zeros(1000), "x": np.zeros(2)}, KINDS, worker=0, max_bytes=100)
    assert small.entries == [("x", "array")] and "too large: 0.0 MiB" in dict(small.skipped)["big"]
    assert session_state.kind_of(float("nan"), KINDS) is None and session_state.kind_of({1: "a"}, KINDS) is None


def test_the_save_is_private_complete_last_and_keeps_only_the_newest(run_dir):
    namespace = trained_namespace()
    old = session_state.save_namespace({"x": np.zeros(2)}, run_dir, 3, 0, 2**20, KINDS)
    report = session_state.save_namespace(namespace, run_dir, 4, 0, 2**20, KINDS)
    assert not os.path.exists(old["dir"])  # an older generation's save is dropped
    folder = run_dir / session_wire.STATE_DIR / "gen-4" / "worker-0"
    assert report["dir"] == str(folder)
    assert {e["name"]: (e["kind"], e["detail"]) for e in report["saved"]} == {
        "model": ("model", "2 weights + 3 optimizer variables, 0.0 MiB"), "scale": ("variable", "float32 ()"),
        "x": ("array", "float32 (3, 2)"), "epochs": ("value", "int"), "config": ("value", "dict"),
        "rate": ("array", "float32")}
    for path in [folder, folder.parent, folder.parent.parent]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "model.npz", "scale.npz", "values.json",
                                                         "values.npz"]
    assert json.loads((folder / "values.json").read_text()) == {"epochs": 7, "config": {"lr": 0.01, "tags": ["a"]}}
    assert session_state.latest_saved(run_dir, before=5) == 4 and session_state.latest_saved(run_dir, before=4) is None


def test_a_planted_symlink_stops_the_save(run_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (run_dir / session_wire.STATE_DIR).symlink_to(elsewhere)
    with pytest.raises(UnsafeDirectory, match="symlink"):
        session_state.save_namespace({"x": np.zeros(2)}, run_dir, 1, 0, 2**20, KINDS)
    assert list(elsewhere.iterdir()) == []


def test_new_processes_put_the_values_back_by_themselves_each_worker_its_own(run_dir):
    session_state.save_namespace(trained_namespace(), run_dir, 1, 0, 2**20, KINDS)
    session_state.save_namespace({"x": np.ones(3), "epochs": 9}, run_dir, 1, 1, 2**20, KINDS)
    fresh: dict = {}
    assert session_state.restore_values_after_restart(fresh, str(run_dir), 2, 0) == ["x", "rate", "epochs", "config"]
    assert fresh["x"].tolist() == [[0, 1], [2, 3], [4, 5]] and fresh["config"] == {"lr": 0.01, "tags": ["a"]}
    assert isinstance(fresh["rate"], np.float32) and fresh["rate"] == 0.5  # a numpy scalar stays one
    other: dict = {}
    session_state.restore_values_after_restart(other, str(run_dir), 2, 1)
    assert other["x"].tolist() == [1, 1, 1] and other["epochs"] == 9
    later: dict = {}  # a restart that did not follow a save (a worker killed): nothing comes back by itself
    assert session_state.restore_values_after_restart(later, str(run_dir), 3, 0) == [] and later == {}


def test_restore_assigns_the_saved_values_into_rebuilt_objects_on_every_worker(run_dir, monkeypatch, capsys):
    session_state.save_namespace(trained_namespace(), run_dir, 1, 0, 2**20, KINDS)
    session_state.save_namespace({"x": np.ones(3)}, run_dir, 1, 1, 2**20, KINDS)
    as_worker(monkeypatch, 1, 2)
    rebuilt = {"model": Model(), "scale": Variable(0.0), "x": None}  # compiled, not trained: no optimizer slots
    restored = session_state.restore_session_state(namespace=rebuilt)
    assert restored == {"model": "2 weights + 3 optimizer variables", "scale": "variable assigned", "x": "value"}
    assert rebuilt["model"].weights[0].value.tolist() == [[1.5] * 3] * 2  # worker 0's model, on worker 1
    assert rebuilt["model"].optimizer.iterations.value == 42.0
    assert [s.value.max() for s in rebuilt["model"].optimizer.slots] == [0.25, 0.25]
    assert rebuilt["scale"].value == 2.0 and rebuilt["x"].tolist() == [1, 1, 1]  # its own values
    assert "nbworkers: restored model (2 weights + 3 optimizer variables)" in capsys.readouterr().out
    only = {"scale": Variable(0.0), "model": Model()}
    assert session_state.restore_session_state(["scale"], namespace=only) == {"scale": "variable assigned"}
    assert only["model"].weights[0].value.max() == 0.0


def test_restore_names_what_it_could_not_put_back_and_what_to_do(run_dir, monkeypatch):
    as_worker(monkeypatch, 0, 2)
    with pytest.raises(NoSavedState, match="saves its models, variables and values only when its processes restart"):
        session_state.restore_session_state(namespace={})
    session_state.save_namespace(trained_namespace(), run_dir, 1, 0, 2**20, KINDS)
    wider = {"model": Model(units=4), "x": None}
    with pytest.raises(StateNotRestored) as raised:
        session_state.restore_session_state(["model", "scale", "nothing"], namespace=wider)
    message = str(raised.value)
    assert "model: (model) ValueError: the model's weights: not as saved (here 2: [(2, 4), (4,)]" in message
    assert "build it as the cell that made the saved one did" in message
    assert "scale: (variable) not in this namespace: run the cell that builds it, then restore" in message
    assert "nothing: was not saved" in message


def test_an_unfinished_save_is_never_read(run_dir, monkeypatch):
    session_state.save_namespace({"x": np.zeros(2)}, run_dir, 1, 0, 2**20, KINDS)
    (run_dir / session_wire.STATE_DIR / "gen-1" / "worker-0" / "manifest.json").unlink()
    assert session_state.restore_values_after_restart({}, str(run_dir), 2, 0) == []
    assert session_state.latest_saved(run_dir, before=2) is None
    session_state.save_namespace({"x": np.ones(2)}, run_dir, 1, 1, 2**20, KINDS)  # worker 1 finished; 0 did not
    as_worker(monkeypatch, 1, 2)
    namespace: dict = {}
    with pytest.raises(StateNotRestored, match="worker 0 did not finish saving, or .on --backend ray. saved them"):
        session_state.restore_session_state(namespace=namespace)
    assert namespace["x"].tolist() == [1, 1]  # its own values still come back


def test_the_saved_message_is_checked_field_by_field():
    good = {"event": "saved", "cell": 3, "saved": [{"name": "model", "kind": "model", "detail": "4 weights"}],
            "skipped": [{"name": "dataset", "why": "a DatasetV2"}], "dir": "/runs/train/session-state", "error": ""}
    assert session_wire.validate("cell", good) is None
    for field, value, words in (("saved", [{"name": "m", "kind": "pickle", "detail": ""}], "unknown saved kind"),
                                ("saved", "model", "not a list"), ("skipped", [{"name": 1, "why": "x"}], "not a dict"),
                                ("dir", 3, "dir is not a str"),
                                ("skipped", [{"name": "a", "why": ""}] * 2001, "at most 2000")):
        assert words in (session_wire.validate("cell", {**good, field: value}) or ""), field


def test_no_tensorflow_class_is_a_kind_until_its_module_is_imported(monkeypatch):
    from nbworkers.distlib.saved_state import objects as saved_objects

    monkeypatch.setattr(saved_objects, "sys", types.SimpleNamespace(modules={}))  # nothing of TF or Keras loaded
    assert session_state.loaded_kinds() == Kinds()
    keras = types.SimpleNamespace(Model=Model, Variable=Variable, layers=types.SimpleNamespace(Layer=Module))
    monkeypatch.setattr(saved_objects, "sys", types.SimpleNamespace(modules={"keras": keras}))
    assert session_state.loaded_kinds() == Kinds(models=(Model, Module), variables=(Variable,))
