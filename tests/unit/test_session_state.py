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
from saved_state_fakes import (
    KINDS,
    Metric,
    Model,
    Module,
    Optimizer,
    Variable,
    as_worker,
    fake_checkpoints_on,
    private_run_dir,
    rebuilt_namespace,
    trained_namespace,
)

from nbworkers.distlib.saved_state import namespace as session_state
from nbworkers.distlib.saved_state import plan, rebuild
from nbworkers.distlib.saved_state.namespace import Kinds, NoSavedState, StateNotRestored
from nbworkers.protocol import session_wire
from nbworkers.protocol.private.dirs import UnsafeDirectory


@pytest.fixture(autouse=True)
def fake_checkpoints(monkeypatch):
    fake_checkpoints_on(monkeypatch)


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    return private_run_dir(tmp_path, monkeypatch)


def test_a_namespace_is_sorted_into_what_is_saved_and_what_is_left_out_and_why():
    namespace = trained_namespace()
    plan = session_state.plan_save(namespace, KINDS, worker=0, max_bytes=2**20)
    assert plan.entries == [("model", "model"), ("scale", "variable"), ("x", "array"), ("epochs", "value"),
                            ("config", "value"), ("shape", "array"), ("rate", "array"), ("net", "model"),
                            ("adam", "checkpoint"), ("loss", "checkpoint"), ("pair", "checkpoint"),
                            ("batches", "array")]
    skipped = dict(plan.skipped)  # code and _names: not listed
    assert list(skipped) == ["objects", "history", "stream", "by_number"]
    assert skipped["history"] == "an object" and skipped["objects"] == "a ndarray"
    assert skipped["stream"] == "a generator: where it got to cannot be saved; run the cell that makes it again"
    assert skipped["by_number"] == "a dict with an int key (only str keys are saved)"
    other = session_state.plan_save(namespace, KINDS, worker=1, max_bytes=2**20)
    assert [n for n, _ in other.entries] == ["x", "epochs", "config", "shape", "rate", "batches"]  # trackables: 0's
    small = session_state.plan_save({"big": np.zeros(1000), "x": np.zeros(2)}, KINDS, worker=0, max_bytes=100)
    assert small.entries == [("x", "array")] and "too large: 0.0 MiB" in dict(small.skipped)["big"]
    assert session_state.kind_of(float("nan"), KINDS) is None and session_state.kind_of({1: "a"}, KINDS) is None
    nested = session_state.plan_save({"deep": [[[[[[[[[[1]]]]]]]]], [object()]]}, KINDS, 0, 2**20)
    assert nested.entries == [] and "nested deeper than 8 containers" in dict(nested.skipped)["deep"]
    inside = session_state.plan_save({"mixed": (Model(), [np.zeros(1), object()])}, KINDS, 0, 2**20)
    assert dict(inside.skipped)["mixed"] == "an object at [1][1]"


def test_a_container_comes_apart_into_leaves_and_back():
    value = {"a": (np.zeros(2), 3, [Model()]), "b": []}
    flat = plan.flatten(value, KINDS)
    assert flat.structure == {"dict": [["a", {"tuple": [{"leaf": 0}, {"leaf": 1}, {"list": [{"leaf": 2}]}]}],
                                       ["b", {"list": []}]]}
    assert [kind for kind, _ in flat.leaves] == ["array", "scalar", "model"] and flat.trackable
    again = plan.unflatten(flat.structure, [leaf for _, leaf in flat.leaves])
    assert again["a"][1] == 3 and again["a"][2][0] is value["a"][2][0] and isinstance(again["a"], tuple)
    assert plan.same_shape(flat.structure, plan.flatten({"a": (1, 2, [Model()]), "b": []}, KINDS).structure)
    assert not plan.same_shape(flat.structure, plan.flatten({"a": (1, 2, []), "b": []}, KINDS).structure)


def test_the_save_is_private_complete_last_and_keeps_only_the_newest(run_dir):
    namespace = trained_namespace()
    old = session_state.save_namespace({"x": np.zeros(2)}, run_dir, 3, 0, 2**20, KINDS)
    report = session_state.save_namespace(namespace, run_dir, 4, 0, 2**20, KINDS, built_in={"model": 1, "adam": 2})
    assert not os.path.exists(old["dir"])  # an older generation's save is dropped
    folder = run_dir / session_wire.STATE_DIR / "gen-4" / "worker-0"
    assert report["dir"] == str(folder)
    saved = {e["name"]: (e["kind"], e["detail"].replace(", 0.0 MiB", "")) for e in report["saved"]}
    assert saved == {
        "model": ("model", "2 weights + 3 optimizer variables"), "scale": ("variable", "float32 ()"),
        "x": ("array", "float32 (3, 2)"), "epochs": ("value", "int"), "config": ("value", "dict"),
        "shape": ("array", "a tuple of 2"), "rate": ("array", "float32"),
        "net": ("model", "2 weights + 1 optimizer variables"),
        "adam": ("checkpoint", "Optimizer: 3 variables (iterations 7)"), "loss": ("checkpoint", "Metric: 1 variable"),
        "pair": ("checkpoint", "a tuple of 3: 2 weights + 1 optimizer variables"), "batches": ("array", "a list of 2")}
    assert [e.get("cell") for e in report["saved"][:2]] == [1, None]  # the cell that last bound it, when known
    for path in [folder, folder.parent, folder.parent.parent]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert sorted(p.name for p in folder.iterdir()) == [
        "adam.data-00000-of-00001.npz", "containers.json", "loss.data-00000-of-00001.npz", "manifest.json",
        "model.data-00000-of-00001.npz", "net.data-00000-of-00001.npz", "pair.data-00000-of-00001.npz", "pair.npz",
        "scale.data-00000-of-00001.npz", "values.json", "values.npz"]
    assert json.loads((folder / "values.json").read_text()) == {"epochs": 7, "config": {"lr": 0.01, "tags": ["a"]}}
    manifest = json.loads((folder / "manifest.json").read_text())
    builds = {e["name"]: e["builds"] for e in manifest["saved"] if "builds" in e}
    assert builds["adam"] == {"leaf0": "net"} and builds["model"] == {"leaf0": ""}  # what each optimizer was built for
    assert session_state.latest_saved(run_dir, before=5) == 4 and session_state.latest_saved(run_dir, before=4) is None


def test_a_trackable_past_the_cap_is_left_out_and_its_files_removed(run_dir):
    report = session_state.save_namespace({"model": Model(units=200), "x": np.zeros(8)}, run_dir, 1, 0, 3000, KINDS)
    assert [e["name"] for e in report["saved"]] == ["x"]
    assert report["skipped"][0]["name"] == "model" and "too large" in report["skipped"][0]["why"]
    assert sorted(p.name for p in (run_dir / session_wire.STATE_DIR / "gen-1" / "worker-0").iterdir()) == [
        "manifest.json", "values.npz"]


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
    assert session_state.restore_values_after_restart(fresh, str(run_dir), 2, 0) == [
        "x", "rate", "shape", "batches", "epochs", "config"]
    assert fresh["x"].tolist() == [[0, 1], [2, 3], [4, 5]] and fresh["config"] == {"lr": 0.01, "tags": ["a"]}
    assert isinstance(fresh["rate"], np.float32) and fresh["rate"] == 0.5  # a numpy scalar stays one
    assert fresh["shape"] == (2, 3) and isinstance(fresh["shape"], tuple)  # containers of arrays and scalars
    assert fresh["batches"][0].tolist() == [0, 0] and fresh["batches"][1]["y"].tolist() == [1]
    other: dict = {}
    session_state.restore_values_after_restart(other, str(run_dir), 2, 1)
    assert other["x"].tolist() == [1, 1, 1] and other["epochs"] == 9
    later: dict = {}  # a restart that did not follow a save (a worker killed): nothing comes back by itself
    assert session_state.restore_values_after_restart(later, str(run_dir), 3, 0) == [] and later == {}


def test_restore_reads_the_saved_state_into_rebuilt_objects_on_every_worker(run_dir, monkeypatch, capsys):
    session_state.save_namespace(trained_namespace(), run_dir, 1, 0, 2**20, KINDS)
    session_state.save_namespace({"x": np.ones(3)}, run_dir, 1, 1, 2**20, KINDS)
    as_worker(monkeypatch, 1, 2)
    monkeypatch.setattr(session_state, "loaded_kinds", lambda: KINDS)
    rebuilt = rebuilt_namespace()
    restored = session_state.restore_session_state(namespace=rebuilt)
    assert restored == {"model": "2 weights + 3 optimizer variables", "scale": "variable assigned",
                        "net": "2 weights + 1 optimizer variables", "adam": "Optimizer, 7 steps taken",
                        "loss": "Metric read", "pair": "2 weights + 1 optimizer variables", "x": "value"}
    assert rebuilt["model"].weights[0].value.tolist() == [[1.5] * 3] * 2  # worker 0's model, on worker 1
    assert rebuilt["model"].optimizer.iterations.value == 42.0  # the compiled optimizer, built as saved
    assert [s.value.max() for s in rebuilt["model"].optimizer.slots] == [0.25, 0.25]
    adam = rebuilt["adam"]  # the standalone optimizer: built for net's variables, as it was, then read
    assert adam.built and adam._trainable_variables == rebuilt["net"].weights and adam.iterations.value == 7.0
    assert adam.slots[0].value.tolist() == [[0.5] * 3] * 2 and rebuilt["net"].weights[1].value.tolist() == [2.0] * 3
    assert rebuilt["loss"].variables[0].value == 0.75
    assert rebuilt["pair"][0] is rebuilt["net"] and rebuilt["pair"][1].tolist() == [1, 1]  # saved arrays in place
    assert rebuilt["pair"][2] == "tag" and isinstance(rebuilt["pair"], tuple)
    assert rebuilt["scale"].value == 2.0 and rebuilt["x"].tolist() == [1, 1, 1]  # its own values
    assert "nbworkers: restored model (2 weights + 3 optimizer variables)" in capsys.readouterr().out
    only = {"scale": Variable(0.0), "model": Model()}
    assert session_state.restore_session_state(["scale"], namespace=only) == {"scale": "variable assigned"}
    assert only["model"].weights[0].value.max() == 0.0


def test_an_optimizer_is_not_read_before_the_variables_its_slots_are_for(run_dir, monkeypatch):
    """TensorFlow would put saved slots into slots created later, but not into those a traced step creates."""
    namespace = trained_namespace()
    namespace["other"] = Optimizer()
    namespace["other"].build([Variable(np.zeros(2))])  # built for variables no one name holds
    report = session_state.save_namespace(namespace, run_dir, 1, 0, 2**20, KINDS)
    assert "other" in [e["name"] for e in report["saved"]]
    as_worker(monkeypatch, 0, 2)
    monkeypatch.setattr(session_state, "loaded_kinds", lambda: KINDS)
    alone = {"adam": Optimizer(), "other": Optimizer()}
    with pytest.raises(StateNotRestored) as raised:
        session_state.restore_session_state(["adam", "other"], namespace=alone)
    assert ("adam: (checkpoint) ValueError: its saved slots are for net's variables, and net is not in this "
            "namespace: run the cell that builds net (or call its build(variables)), then restore") in str(raised.value)
    assert "other: (checkpoint) ValueError: its saved slots are for variables that no one name holds" in (
        str(raised.value))
    assert alone["adam"].iterations.value == 0.0  # not read at all
    built = Optimizer()
    built.build([Variable(np.zeros(2))])  # the cell built it itself: read as it is
    assert session_state.restore_session_state(["other"], namespace={"other": built}) == {
        "other": "Optimizer, 0 steps taken"}


def test_restore_names_what_it_could_not_put_back_and_what_to_do(run_dir, monkeypatch):
    as_worker(monkeypatch, 0, 2)
    monkeypatch.setattr(session_state, "loaded_kinds", lambda: KINDS)
    with pytest.raises(NoSavedState, match="saves its models, variables and values only when its processes restart"):
        session_state.restore_session_state(namespace={})
    session_state.save_namespace(trained_namespace(), run_dir, 1, 0, 2**20, KINDS)
    wider = {"model": Model(units=4), "x": None, "pair": [Model(), 1, 2], "loss": np.zeros(1)}
    with pytest.raises(StateNotRestored) as raised:
        session_state.restore_session_state(["model", "scale", "nothing", "pair", "loss"], namespace=wider)
    message = str(raised.value)
    assert "model: (model) ValueError: leaf0: not as saved" in message
    assert "scale: (variable) not in this namespace: run the cell that builds it, then restore" in message
    assert "nothing: was not saved" in message
    assert "pair: (checkpoint) ValueError: here it is a list of another shape than the saved one" in message
    assert "loss: (checkpoint) ValueError: here its leaf0 is a ndarray, saved was a checkpoint" in message


def test_an_unfinished_save_is_never_read(run_dir, monkeypatch):
    session_state.save_namespace({"x": np.zeros(2)}, run_dir, 1, 0, 2**20, KINDS)
    (run_dir / session_wire.STATE_DIR / "gen-1" / "worker-0" / "manifest.json").unlink()
    assert session_state.restore_values_after_restart({}, str(run_dir), 2, 0) == []
    assert session_state.latest_saved(run_dir, before=2) is None
    session_state.save_namespace({"x": np.ones(2)}, run_dir, 1, 1, 2**20, KINDS)  # worker 1 finished; 0 did not
    as_worker(monkeypatch, 1, 2)
    namespace: dict = {}
    with pytest.raises(StateNotRestored, match="worker 0 did not finish saving, or .on --backend ray. its save stayed on its node"):
        session_state.restore_session_state(namespace=namespace)
    assert namespace["x"].tolist() == [1, 1]  # its own values still come back


def test_the_saved_message_is_checked_field_by_field():
    good = {"event": "saved", "cell": 3, "saved": [{"name": "model", "kind": "model", "detail": "4 weights", "cell": 1}],
            "skipped": [{"name": "dataset", "why": "a DatasetV2"}], "dir": "/runs/train/session-state", "error": ""}
    assert session_wire.validate("cell", good) is None
    for field, value, words in (("saved", [{"name": "m", "kind": "pickle", "detail": ""}], "unknown saved kind"),
                                ("saved", "model", "not a list"), ("skipped", [{"name": 1, "why": "x"}], "not a dict"),
                                ("dir", 3, "dir is not a str"),
                                ("saved", [{"name": "m", "kind": "model", "detail": "", "cell": "1"}], "cell is not an int"),
                                ("skipped", [{"name": "a", "why": ""}] * 2001, "at most 2000")):
        assert words in (session_wire.validate("cell", {**good, field: value}) or ""), field


def test_no_tensorflow_class_is_a_kind_until_its_module_is_imported(monkeypatch):
    from nbworkers.distlib.saved_state import objects as saved_objects

    monkeypatch.setattr(saved_objects, "sys", types.SimpleNamespace(modules={}))  # nothing of TF or Keras loaded
    assert session_state.loaded_kinds() == Kinds()
    keras = types.SimpleNamespace(Model=Model, Variable=Variable, layers=types.SimpleNamespace(Layer=Module))
    monkeypatch.setattr(saved_objects, "sys", types.SimpleNamespace(modules={"keras": keras}))
    assert session_state.loaded_kinds() == Kinds(models=(Model, Module), variables=(Variable,))
    keras.optimizers = types.SimpleNamespace(Optimizer=Optimizer)
    keras.metrics = types.SimpleNamespace(Metric=Metric)
    assert session_state.loaded_kinds() == Kinds(models=(Model, Module), variables=(Variable,),
                                                 checkpointables=(Optimizer,), holders=(Metric,))


def test_when_worker_0_is_gone_the_holder_saves_the_trackables_and_every_worker_reads_them(run_dir, monkeypatch):
    report = session_state.save_namespace(trained_namespace(), run_dir, 1, 1, 2**20, KINDS, holder=1)
    assert "model" in [e["name"] for e in report["saved"]]  # worker 1 saved them in worker 0's place
    assert "model" not in [e["name"] for e in session_state.save_namespace(
        trained_namespace(), run_dir, 1, 2, 2**20, KINDS, holder=1)["saved"]]  # the others save their values only
    assert rebuild.waiting_names(str(run_dir), 2)["model"] == set()
    as_worker(monkeypatch, 0, 2)  # the new worker 0 reads worker 1's checkpoints
    monkeypatch.setattr(session_state, "loaded_kinds", lambda: KINDS)
    rebuilt = rebuilt_namespace()
    assert session_state.restore_session_state(["model"], namespace=rebuilt) == {
        "model": "2 weights + 3 optimizer variables"}
    assert rebuilt["model"].optimizer.iterations.value == 42.0
