"""Frameworks by registration (magics/frameworks/): TensorFlow's registered through its entry point, its environment
contract giving each task the TF_CONFIG the composition before the seam gave, a framework registered from a test
taking a launch's variables, and no module but the TensorFlow framework's composing TF_CONFIG."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from nbworkers.magics.backends import run_env, zygotes
from nbworkers.magics.frameworks import Framework
from nbworkers.magics.frameworks import registry as frameworks
from nbworkers.magics.frameworks.tensorflow import TF
from nbworkers.magics.launch.environment import worker_env
from nbworkers.magics.launch.tfconfig import Task, plan_tasks

ROOT = Path(__file__).resolve().parents[2]
CODE = ("magics", "extension", "host", "procs", "protocol")
COMPOSER = ROOT / "magics" / "frameworks" / "tensorflow.py"


def old_tf_configs(tasks: list[Task], host: str | list[str], ports: list[int]) -> list[str]:
    """launch/tfconfig.py's composition before the seam, verbatim."""
    hosts = [host] * len(tasks) if isinstance(host, str) else host
    spec: dict[str, list[str]] = {}
    for task, task_host, port in zip(tasks, hosts, ports):
        if task.role in ("chief", "worker", "ps"):
            spec.setdefault(task.role, []).append(f"{task_host}:{port}")
    return [json.dumps({"cluster": spec, "task": {"type": t.role, "index": t.index}}) for t in tasks]


@pytest.fixture
def isolated_registry(monkeypatch):
    monkeypatch.setattr(frameworks, "_frameworks", dict(frameworks.frameworks()))


def test_tensorflow_is_registered_through_its_entry_point_and_is_the_default():
    points = {point.name: point.value for point in frameworks._entry_points()}
    assert points["tf"] == "nbworkers.magics.frameworks.tensorflow:TF"
    assert frameworks.get("TF") is TF and frameworks.get("") is TF and isinstance(TF, Framework)
    assert frameworks.variables() >= {"TF_CONFIG"} and frameworks.blank() == {"TF_CONFIG": ""}
    with pytest.raises(LookupError, match="framework mxnet: no such framework"):
        frameworks.get("mxnet")


@pytest.mark.parametrize("hosts", ["localhost", ["10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.3", "10.0.0.1", "h4"]])
def test_each_task_gets_the_tf_config_it_got_before_the_seam(hosts):
    tasks = plan_tasks(2, chief=True, evaluator=True, ps=2)
    assert [t.label for t in tasks] == ["chief 0", "worker 0", "worker 1", "ps 0", "ps 1", "evaluator 0"]
    ports = [3000 + i for i in range(len(tasks))]
    per_host = [hosts] * len(tasks) if isinstance(hosts, str) else hosts
    got = [TF.environment(tasks, per_host, ports, i) for i in range(len(tasks))]
    assert got == [{"TF_CONFIG": config} for config in old_tf_configs(tasks, hosts, ports)]
    assert "evaluator" not in json.loads(got[-1]["TF_CONFIG"])["cluster"]


def test_the_frameworks_variables_are_per_worker_everywhere(isolated_registry, monkeypatch):
    class Fake:
        name, variables, shown = "fake", frozenset({"FAKE_RANK"}), "FAKE_RANK"
        summary, flags, roles, chatter, requires = "a fake", (), frozenset({"worker"}), (), ()

        def environment(self, tasks, hosts, ports, index):
            return {"FAKE_RANK": str(index)}

        def shared(self, options):
            return {}

    frameworks.register(Fake())
    kernel = {"PATH": "/bin", "TF_CONFIG": "kernel's", "FAKE_RANK": "9"}
    assert worker_env(kernel, {"FAKE_RANK": "5"}, {"FAKE_RANK": "1"}, "-1", {})["FAKE_RANK"] == "1"
    assert "TF_CONFIG" not in worker_env(kernel, {}, {"FAKE_RANK": "1"}, "-1", {})
    assert not {"TF_CONFIG", "FAKE_RANK"} & (set(run_env.base_env(kernel)) | set(zygotes.import_env(kernel)))
    assert {"TF_CONFIG", "FAKE_RANK"} <= zygotes.child_only()


def _composes_tf_config(tree: ast.AST) -> list[int]:
    """Lines that write the literal "TF_CONFIG" as a key (a dict's, a subscript assignment's) or build the JSON
    of a ``{"cluster": ..., "task": ...}`` object."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if "TF_CONFIG" in keys or {"cluster", "task"} <= keys:
                found.append(node.lineno)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
                        and target.slice.value == "TF_CONFIG"):
                    found.append(node.lineno)
    return found


def test_no_module_but_the_tensorflow_frameworks_composes_tf_config():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in CODE for path in sorted((ROOT / folder).rglob("*.py")) if path != COMPOSER
        for line in _composes_tf_config(ast.parse(path.read_text()))
    ]
    assert not offenders, offenders
    assert _composes_tf_config(ast.parse(COMPOSER.read_text()))  # the check finds the one composition
