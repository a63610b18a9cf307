"""Backends by registration (magics/backends/registry.py, arguments.py): the built-in ones found through their entry
points, a backend registered later in the parser's choices and help, each backend's flags filling its options and
refused with another backend, and no code outside magics/backends/ that branches on a backend's name or probes a
backend with ``getattr``."""

from __future__ import annotations

import ast
from argparse import Namespace
from pathlib import Path

import pytest
from fake_backend import FAKE, FakeOptions
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from nbworkers.magics.backends import registry
from nbworkers.magics.backends.arguments import backend_arguments, chosen
from nbworkers.magics.backends.local import LocalBackend, LocalOptions
from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.notebook.parse import check_min_workers

ROOT = Path(__file__).resolve().parents[2]
CODE = ("magics", "extension", "host", "procs", "protocol")


@pytest.fixture
def isolated_registry(monkeypatch):
    """The registry as installed, changes undone after the test (and no parser built before it hears of them)."""
    monkeypatch.setattr(registry, "_kinds", dict(registry.kinds()))
    monkeypatch.setattr(registry, "_listeners", [])


def _magic():
    @magic_arguments()
    @argument("-n", "--workers", type=int, default=2)
    @backend_arguments()
    def worker(line):
        """A magic with the backends' arguments."""

    return worker


def test_the_built_in_backends_are_registered_through_their_entry_points():
    points = {point.name: point.value for point in registry._entry_points()}
    assert points["local"] == "nbworkers.magics.backends.local:LOCAL"
    assert points["ray"] == "nbworkers.magics.backends.ray.kind:RAY"
    assert points["slurm"] == "nbworkers.magics.backends.slurm.kind:SLURM"
    assert list(registry.kinds())[:2] == ["local", "ray"]  # the default first
    assert registry.get("Ray").name == "ray"  # names are case-insensitive
    assert registry.names(lambda kind: kind.can_detach) == ["local", "ray", "slurm"]
    with pytest.raises(LookupError, match="--backend k8s: no such backend"):
        registry.get("k8s")


def test_a_backend_registered_later_is_a_choice_with_its_flags_in_a_group_of_its_own(isolated_registry):
    worker = _magic()
    with pytest.raises(Exception, match="invalid choice: 'fake'"):
        parse_argstring(worker, "--backend fake")
    registry.register(FAKE)
    args = parse_argstring(worker, "--backend FAKE --fake-node rack7")
    assert (args.backend, args.fake_node) == ("fake", "rack7")
    kind, options = chosen(args)
    assert kind is FAKE and options == FakeOptions(fake_node="rack7")
    usage = worker.parser.format_help()
    assert "--backend fake:" in usage and "--backend ray:" in usage and "{local,ray," in usage and ",fake}" in usage, usage
    assert "a fake backend of the tests" in " ".join(usage.split())


def test_each_backends_flags_fill_its_options_and_are_refused_with_another(isolated_registry):
    registry.register(FAKE)
    worker = _magic()
    kind, options = chosen(parse_argstring(worker, "--isolation off"))
    assert kind.name == "local" and options == LocalOptions(isolation="off")
    assert isinstance(kind.backend_for(LaunchSpec(code="x", options=options)), LocalBackend)
    assert kind.backend_for(LaunchSpec(code="x")).isolation == ""  # a spec without options: the defaults
    with pytest.raises(LaunchError, match=r"^--address, --spread: only for the Ray backend\. Add --backend ray\.$"):
        chosen(parse_argstring(worker, "--address h:1 --spread"))
    with pytest.raises(LaunchError, match=r"^--fake-node: only for the fake backend\. Add --backend fake\.$"):
        chosen(parse_argstring(worker, "--fake-node rack7"))
    with pytest.raises(LaunchError, match="--isolation: only for the local backend"):
        chosen(parse_argstring(worker, "--backend fake --isolation off"))
    with pytest.raises(LaunchError, match="give a name without spaces"):
        chosen(parse_argstring(worker, "--backend fake --fake-node 'a b'"))
    with pytest.raises(LaunchError, match="--cpus-per-worker -1: give a positive number"):
        chosen(parse_argstring(worker, "--backend ray --cpus-per-worker -1"))


def test_only_an_elastic_backend_takes_min_workers(isolated_registry):
    registry.register(FAKE)
    plain = {"workers": 4, "chief": False, "evaluator": 0, "ps": None, "min_workers": 2}
    with pytest.raises(LaunchError) as refused:
        check_min_workers(Namespace(backend="fake", **plain))
    assert str(refused.value) == ("--min-workers: only for the Ray backend, where nodes come and go (one machine "
                                  "keeps its -n workers). Add --backend ray, or leave it out.")
    check_min_workers(Namespace(backend="ray", **plain))


def _code_outside_backends():
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if (ROOT / "magics" / "backends") not in path.parents:
                yield path, ast.parse(path.read_text(), str(path))


def _names_backend(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return "backend" in text or "handle" in text


def test_no_code_outside_the_backends_branches_on_a_backends_name_or_probes_one():
    """``x.backend == "ray"``, ``backend in ("local", "ray")``, ``getattr(backend, ...)``, ``getattr(handle, ...)``
    only in magics/backends/: everything else asks the registry or the protocol."""
    names = set(registry.kinds()) | {"local", "ray"}
    found = []
    for path, tree in _code_outside_backends():
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                strings = {c.value for side in sides for c in ast.walk(side)
                           if isinstance(c, ast.Constant) and isinstance(c.value, str)}
                if strings & names and any(_names_backend(side) for side in sides):
                    found.append(f"{where}: {ast.unparse(node)}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr",
                                                                                                   "hasattr"):
                if node.args and _names_backend(node.args[0]):
                    found.append(f"{where}: {ast.unparse(node)}")
    assert not found, "\n".join(found)


def test_load_ext_prewarms_and_stop_all_releases_through_the_registry(isolated_registry, monkeypatch):
    calls: list[str] = []
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    registry.register(registry.BackendKind(
        name="keeper", title="keeper", summary="keeps things", options=FakeOptions, create=FAKE.create,
        prewarm=lambda: calls.append("prewarm"), release_idle=lambda: 2))
    registry.prewarm()  # Ray without RAY_ADDRESS: nothing
    assert calls == ["prewarm"]
    assert registry.release_idle() == 2  # Ray's pool never used: 0


def test_rays_prewarm_starts_the_nodes_zygotes_when_ray_address_is_set(monkeypatch):
    from nbworkers.magics.backends.ray.groups import prewarm

    asked: list[str] = []
    monkeypatch.setattr(prewarm, "prewarm_nodes", asked.append)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    registry.get("ray").prewarm()
    assert asked == ["127.0.0.1:6379"]
