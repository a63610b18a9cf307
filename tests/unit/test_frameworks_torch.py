"""PyTorch (magics/frameworks/torch.py, distlib/frameworks/torch.py): torchrun's environment contract (MASTER_ADDR and
MASTER_PORT at worker 0, RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE per host, GROUP_RANK per host), the
OMP_NUM_THREADS every worker shares (the zygote's key), --framework torch in the magic's parser, and the worker side:
its zygote's guard (CUDA initialised), the process group destroyed at a finished worker's end only, the error when
PyTorch is missing; a Ray run forwards the variables and asks its nodes for a PyTorch zygote. Imports no PyTorch
(stand-ins)."""

from __future__ import annotations

import sys
import types

import pytest
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from nbworkers.distlib import frameworks as worker_frameworks
from nbworkers.magics.backends import zygotes
from nbworkers.magics.errors import LaunchError
from nbworkers.magics.frameworks import Framework
from nbworkers.magics.frameworks import registry as frameworks
from nbworkers.magics.frameworks.arguments import check_installed, chosen, framework_arguments
from nbworkers.magics.frameworks.torch import TORCH
from nbworkers.magics.launch.environment import worker_env
from nbworkers.magics.launch.tfconfig import plan_tasks


def test_each_worker_gets_torchruns_variables_with_local_ranks_per_host():
    assert frameworks.get("Torch") is TORCH and isinstance(TORCH, Framework)
    hosts, ports = ["127.0.0.1"] * 3, [4100, 4101, 4102]
    got = [TORCH.environment(plan_tasks(3), hosts, ports, i) for i in range(3)]
    assert got[2] == {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "4100", "RANK": "2", "WORLD_SIZE": "3",
                      "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "3", "GROUP_RANK": "0", "ROLE_RANK": "2",
                      "ROLE_WORLD_SIZE": "3"}
    assert TORCH.variables == set(got[0]) and TORCH.variables <= zygotes.child_only()
    # two hosts, their workers interleaved (as a Ray cluster may place them): ranks per host, hosts by first worker
    hosts = ["10.0.0.2", "10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.2"]
    got = [TORCH.environment(plan_tasks(5), hosts, [7, 8, 9, 10, 11], i) for i in range(5)]
    assert [(g["RANK"], g["LOCAL_RANK"], g["LOCAL_WORLD_SIZE"], g["GROUP_RANK"]) for g in got] == [
        ("0", "0", "3", "0"), ("1", "0", "2", "1"), ("2", "1", "3", "0"), ("3", "1", "2", "1"), ("4", "2", "3", "0")]
    assert {(g["MASTER_ADDR"], g["MASTER_PORT"], g["WORLD_SIZE"]) for g in got} == {("10.0.0.2", "7", "5")}


def test_the_kernels_ranks_are_never_inherited_and_omp_threads_keys_the_zygote(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    kernel = {"PATH": "/bin", "RANK": "5", "LOCAL_RANK": "5", "MASTER_PORT": "1"}
    shared = frameworks.shared("torch")
    assert shared == {"NBWORKERS_FRAMEWORK": "torch", "OMP_NUM_THREADS": "1"}
    per_worker = TORCH.environment(plan_tasks(2), ["127.0.0.1"] * 2, [3, 4], 1)
    env = worker_env(kernel, {}, per_worker, "-1", {}, shared=shared)
    assert (env["RANK"], env["LOCAL_RANK"], env["MASTER_PORT"], env["OMP_NUM_THREADS"]) == ("1", "1", "3", "1")
    assert worker_env(kernel, {"OMP_NUM_THREADS": "2"}, per_worker, "-1", {}, shared=shared)["OMP_NUM_THREADS"] == "2"
    tf_env = worker_env(kernel, {}, {"TF_CONFIG": "{}"}, "-1", {})
    assert "RANK" not in tf_env and "MASTER_PORT" not in tf_env  # every framework's variables: never the kernel's
    key = zygotes.import_env(env)
    assert key["NBWORKERS_FRAMEWORK"] == "torch" and key["OMP_NUM_THREADS"] == "1" and not set(per_worker) & set(key)
    assert zygotes.zygote_key(sys.executable, env) != zygotes.zygote_key(sys.executable, tf_env)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # the kernel's own setting is kept, as torchrun keeps it
    assert frameworks.shared("torch") == {"NBWORKERS_FRAMEWORK": "torch"}


def test_framework_torch_is_parsed_and_its_roles_checked(monkeypatch):
    @magic_arguments()
    @argument("-n", "--workers", type=int, default=2)
    @argument("--chief", action="store_true")
    @framework_arguments()
    def worker(line):
        """A magic with the frameworks' arguments."""

    assert chosen(parse_argstring(worker, "--framework torch")) == (TORCH, {})
    with pytest.raises(LaunchError, match="--chief: not a role of --framework torch"):
        chosen(parse_argstring(worker, "--framework torch --chief"))
    from nbworkers.magics.frameworks import arguments

    monkeypatch.setattr(arguments.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LaunchError, match=r'--framework torch: torch is not installed .*pip install "nbworkers\[torch\]"'):
        check_installed(TORCH, sys.executable)


def _stand_in_torch(monkeypatch, cuda_initialized: bool = False, group: bool = False) -> list[str]:
    calls: list[str] = []
    state = {"group": group}
    dist = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: state["group"],
                                 destroy_process_group=lambda: calls.append("destroyed"))
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: cuda_initialized),
                                  distributed=dist)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    return calls


def test_the_worker_side_forks_only_before_cuda_and_destroys_the_group_of_a_finished_run(monkeypatch):
    monkeypatch.setenv("NBWORKERS_FRAMEWORK", "torch")
    module = worker_frameworks.current()
    assert worker_frameworks.module_name("TORCH") == "nbworkers.distlib.frameworks.torch" == module.__name__
    assert module.preload()[:2] == ["torch", "torch.distributed"] and module.guard_broken() == ""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert module.fork_refusal() is None  # (no PyTorch imported: nothing started)
    _stand_in_torch(monkeypatch)
    assert module.fork_refusal() is None
    _stand_in_torch(monkeypatch, cuda_initialized=True)
    assert "CUDA is initialised" in (module.fork_refusal() or "")

    from nbworkers.distlib.worker import stop_signal

    calls = _stand_in_torch(monkeypatch, group=True)
    module.leaving(1)  # failed: its peers' collectives end when its sockets close, no clean-up that may wait
    monkeypatch.setattr(stop_signal, "_stop_requested", True)
    module.leaving(0)  # stopped (a cell that caught the KeyboardInterrupt)
    assert calls == []
    monkeypatch.setattr(stop_signal, "_stop_requested", False)
    module.leaving(0)
    assert calls == ["destroyed"]
    calls = _stand_in_torch(monkeypatch, group=False)
    module.leaving(0)  # never joined (or destroyed by the cell): nothing to do
    assert calls == []


def test_a_worker_without_pytorch_says_what_to_install(monkeypatch):
    from nbworkers.distlib.frameworks import torch as torch_worker

    monkeypatch.setitem(sys.modules, "torch.distributed", None)  # import torch.distributed raises ImportError
    with pytest.raises(ImportError, match=r'--framework torch: .* not installed .*pip install "nbworkers\[torch\]"'):
        torch_worker.before_user_code()


def test_c10ds_warning_in_a_private_network_namespace_is_chatter():
    from nbworkers.magics.run.noise import is_chatter

    line = "[W1129 07:12:05.069423461 socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved. err=-3"
    assert is_chatter(line, 1) and not is_chatter(line, 0)
    assert not is_chatter("[c10d] The hostname of the client socket cannot be retrieved. (the cell's print)", 2)


def test_a_torch_run_on_ray_forwards_torchruns_variables_and_asks_for_a_torch_zygote(monkeypatch):
    from nbworkers.magics.backends.ray.backend import RayBackend
    from nbworkers.magics.backends.ray.options import RayOptions
    from nbworkers.magics.launch.spec import LaunchSpec

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    backend = RayBackend.from_spec(LaunchSpec(code="x = 1", framework="torch"), RayOptions(address="127.0.0.1:1"))
    python, forwarded = backend.zygote_request()
    assert (forwarded["NBWORKERS_FRAMEWORK"], forwarded["OMP_NUM_THREADS"]) == ("torch", "1")
    per_worker = TORCH.environment(plan_tasks(2), ["10.0.0.1", "10.0.0.2"], [1, 2], 1)
    assert (per_worker["LOCAL_RANK"], per_worker["LOCAL_WORLD_SIZE"], per_worker["GROUP_RANK"]) == ("0", "1", "1")
    env = worker_env({"PATH": "/bin"}, {}, per_worker, "-1", {}, shared=backend.shared)
    assert set(per_worker) | set(backend.shared) <= set(backend._worker_variables(env))
