"""The declared shapes (magics/shapes.py) are the shapes the parts really pass: the snapshot a cluster makes, the
state file and what the REST API and attach read back, the backend and worker interfaces; and every status has
a label. mypy checks the signatures (tests/integration/test_lint.py); these check the running code against the declarations."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nbworkers.magics import shapes
from nbworkers.magics.run.core.logtail import LogTail
from nbworkers.magics.run.core.state import ClusterState, WorkerState
from nbworkers.magics.rundir.layout import read_state, write_state
from nbworkers.magics.rundir.listing import describe, list_runs
from nbworkers.magics.views import summary
from nbworkers.protocol.statuses import ClusterStatus, WorkerStatus


def _declared(typed_dict) -> set[str]:
    return set(typed_dict.__required_keys__) | set(typed_dict.__optional_keys__)


def _state(run_dir: Path) -> ClusterState:
    workers = [WorkerState(index=i, log_path=str(run_dir / f"worker-{i}.log"), log_tail=LogTail()) for i in range(2)]
    state = ClusterState(name=run_dir.name, workers=workers, run_dir=str(run_dir), kernel_pid=os.getpid(),
                         kernel_id="k1")
    workers[0].apply_metrics({"step": 3, "epoch": 1, "steps_total": 10, "metrics": {"loss": 0.5}})
    workers[1].log_tail.feed(["hello\n"])
    state.restart_history.append({"generation": 1, "cause": "crash", "kind": "WorkerCrashed", "worker": 1,
                                  "time": 1.0, "resumed_from": None})
    return state


def test_a_snapshot_has_exactly_the_declared_fields(tmp_path):
    snapshot = _state(tmp_path / "run").snapshot()
    assert set(snapshot) == set(shapes.ClusterSnapshot.__required_keys__)
    for worker in snapshot["workers"]:
        assert set(worker) == _declared(shapes.WorkerSnapshot)
        assert set(shapes.WorkerSnapshot.__required_keys__) <= set(worker)
    for entry in snapshot["restart_history"]:
        assert set(entry) <= _declared(shapes.RestartEntry)
    json.dumps(snapshot)  # JSON-able as it is


def test_state_file_rest_api_and_attach_read_the_same_shape(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    data = dict(_state(run_dir).snapshot())
    data.update(hostname="here", host_pids=[1, 2], worker_pgids=[], run_id="r1",  # what the supervisor adds
                isolation={"mode": "off", "reason": "test"}, cell_id="c-1", notebook="/home/u/nb.ipynb")
    for worker in data["workers"]:
        worker.pop("history")
    write_state(run_dir, data)
    assert set(read_state(run_dir) or {}) <= _declared(shapes.ClusterSnapshot)

    full = describe(run_dir, full=True)
    assert full is not None and set(full) <= _declared(shapes.ClusterSnapshot)
    assert set(shapes.ClusterSnapshot.__required_keys__) <= set(full)
    for worker in full["workers"]:
        assert set(worker) <= _declared(shapes.WorkerSnapshot)

    rows = list_runs(tmp_path)
    assert [row["name"] for row in rows] == ["run"]
    assert set(rows[0]) == _declared(shapes.RunRow)
    assert rows[0]["isolation"] == {"mode": "off", "reason": "test"}
    # the cell that started it and its notebook: the sidebar runs that cell again after a kernel restart
    assert (rows[0]["cell_id"], rows[0]["notebook"]) == ("c-1", "/home/u/nb.ipynb")

    from nbworkers.magics.notebook.remote.attach import AttachedCluster

    attached = AttachedCluster(run_dir).snapshot()
    assert set(attached) <= _declared(shapes.ClusterSnapshot) and attached["attached"] is True
    assert "Error" not in summary.render_text(attached)  # the views take it as they take a live one


@pytest.mark.parametrize("status", [s.value for s in ClusterStatus] + [s.value for s in WorkerStatus])
def test_every_status_has_a_label_and_a_colour(status):
    assert status in summary.STATUS_LABELS and status in summary.STATUS_COLORS
    assert summary.status_label(status)
    assert summary.STATUS_COLORS[status] in summary._badge(status)


def test_lost_reads_stopped_with_why_and_stopping_as_itself():
    assert summary.status_label("lost") == "stopped (its kernel restarted or died)"  # one status: as once reaped
    assert summary.status_label("stopping") == "stopping"


def _members(protocol) -> set[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {name for name, value in vars(protocol).items() if not name.startswith("_") and
              (callable(value) or isinstance(value, property))}
    return names


def test_the_backends_and_views_have_what_the_protocols_declare():
    from nbworkers.magics.backends.local import LocalBackend, WorkerProcess
    from nbworkers.magics.views.view import TextView

    for cls, protocol in ((LocalBackend, shapes.Backend), (TextView, shapes.View)):
        missing = {name for name in _members(protocol) if not hasattr(cls, name)}
        assert not missing, f"{cls.__name__} lacks {missing}"
    instance_fields = set(WorkerProcess.__dataclass_fields__)
    missing = {name for name in _members(shapes.WorkerHandle) if not hasattr(WorkerProcess, name)} - instance_fields
    assert not missing
