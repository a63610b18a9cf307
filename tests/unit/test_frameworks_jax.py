"""Keras 3 on JAX (magics/frameworks/jax.py, arguments.py; distlib/frameworks): the environment contract Keras reads
(every worker's address, worker 0's first; the process count and index), the variables every worker shares and its
zygote is keyed by (KERAS_BACKEND=jax under the user's --env, JAX_NUM_CPU_DEVICES from --cpu-devices,
NBWORKERS_FRAMEWORK), --framework and its flag in the magic's parser, the roles JAX has not refused, and the
worker module the worker side picks. Imports no JAX."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest
from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from nbworkers.distlib import frameworks as worker_frameworks
from nbworkers.magics.backends import zygotes
from nbworkers.magics.errors import LaunchError
from nbworkers.magics.frameworks import Framework
from nbworkers.magics.frameworks import registry as frameworks
from nbworkers.magics.frameworks.arguments import chosen, framework_arguments
from nbworkers.magics.frameworks.jax import JAX
from nbworkers.magics.frameworks.tensorflow import TF
from nbworkers.magics.launch.environment import worker_env
from nbworkers.magics.launch.tfconfig import plan_tasks


def _magic():
    @magic_arguments()
    @argument("-n", "--workers", type=int, default=2)
    @argument("--chief", action="store_true")
    @argument("--ps", type=int, default=None)
    @argument("--evaluator", nargs="?", type=int, const=1, default=0)
    @argument("--env", action="append", default=[])
    @framework_arguments()
    def worker(line):
        """A magic with the frameworks' arguments."""

    return worker


def test_jax_is_registered_and_gives_each_worker_keras_distribution_variables():
    assert frameworks.get("JAX") is JAX and isinstance(JAX, Framework)
    assert list(frameworks.frameworks())[0] == "tf"  # the default first
    tasks = plan_tasks(3)
    hosts, ports = ["127.0.0.1"] * 3, [4100, 4101, 4102]
    got = [JAX.environment(tasks, hosts, ports, i) for i in range(3)]
    assert got[1] == {"KERAS_DISTRIBUTION_JOB_ADDRESSES": "127.0.0.1:4100,127.0.0.1:4101,127.0.0.1:4102",
                      "KERAS_DISTRIBUTION_NUM_PROCESSES": "3", "KERAS_DISTRIBUTION_PROCESS_ID": "1"}
    assert [g["KERAS_DISTRIBUTION_PROCESS_ID"] for g in got] == ["0", "1", "2"]
    assert JAX.variables == set(got[0]) and JAX.variables <= zygotes.child_only()


def test_the_shared_variables_key_the_zygote_and_the_users_env_wins():
    kernel = {"PATH": "/bin", "KERAS_BACKEND": "tensorflow", "TF_CONFIG": "kernel's"}
    shared = frameworks.shared("jax", {"cpu_devices": 4})
    assert shared == {"NBWORKERS_FRAMEWORK": "jax", "KERAS_BACKEND": "jax", "JAX_NUM_CPU_DEVICES": "4"}
    per_worker = JAX.environment(plan_tasks(2), ["127.0.0.1"] * 2, [1, 2], 0)
    env = worker_env(kernel, {}, per_worker, "-1", {}, shared=shared)
    assert env["KERAS_BACKEND"] == "jax" and env["JAX_NUM_CPU_DEVICES"] == "4" and "TF_CONFIG" not in env
    assert worker_env(kernel, {"KERAS_BACKEND": "torch"}, per_worker, "-1", {}, shared=shared)["KERAS_BACKEND"] == \
        "torch"
    tf_env = worker_env(kernel, {}, TF.environment(plan_tasks(2), ["h"] * 2, [1, 2], 0), "-1", {})
    assert tf_env["NBWORKERS_FRAMEWORK"] == "tf" and tf_env["KERAS_BACKEND"] == "tensorflow"
    key = zygotes.import_env
    assert key(env)["NBWORKERS_FRAMEWORK"] == "jax" and key(env)["JAX_NUM_CPU_DEVICES"] == "4"
    assert not set(per_worker) & set(key(env))
    assert zygotes.zygote_key(sys.executable, env) != zygotes.zygote_key(sys.executable, tf_env)
    assert zygotes.zygote_key(sys.executable, env) == zygotes.zygote_key(
        sys.executable, worker_env(kernel, {}, JAX.environment(plan_tasks(2), ["127.0.0.1"] * 2, [7, 8], 1), "-1",
                                   {}, shared=shared))  # every worker of the run forks from one zygote


def test_framework_and_its_flag_are_parsed_and_checked():
    worker = _magic()
    framework, options = chosen(parse_argstring(worker, ""))
    assert framework is TF and options == {}
    framework, options = chosen(parse_argstring(worker, "--framework JAX --cpu-devices 2"))
    assert framework is JAX and options == {"cpu_devices": 2}
    assert chosen(parse_argstring(worker, "--framework jax"))[1] == {"cpu_devices": 1}
    with pytest.raises(UsageError):
        parse_argstring(worker, "--framework mxnet")
    with pytest.raises(UsageError):
        parse_argstring(worker, "--framework jax --cpu-devices 0")
    with pytest.raises(LaunchError, match="--cpu-devices: only with --framework jax"):
        chosen(parse_argstring(worker, "--cpu-devices 2"))
    with pytest.raises(LaunchError, match="--chief, --ps: not a role of --framework jax"):
        chosen(parse_argstring(worker, "--framework jax --chief --ps 1"))
    assert chosen(parse_argstring(worker, "--chief"))[0] is TF


def test_the_worker_side_picks_its_module_by_the_variable_the_kernel_sets(monkeypatch):
    assert worker_frameworks.module_name("") == "nbworkers.distlib.frameworks.tensorflow"
    assert worker_frameworks.module_name("JAX") == "nbworkers.distlib.frameworks.jax"
    with pytest.raises(LookupError, match="no worker module"):
        worker_frameworks.module_name("mxnet")
    monkeypatch.setenv("NBWORKERS_FRAMEWORK", "jax")
    module = worker_frameworks.current()
    assert module.NAME == "jax" and "jax" in module.preload()
    # TensorFlow too when installed: keras.distribution.initialize() imports it (Keras seeds tf.random)
    assert ("tensorflow" in module.preload()) == (importlib.util.find_spec("tensorflow") is not None)
    assert module.fork_refusal() is None  # no JAX imported here: no backend
    # the zygote's TensorFlow counts too: a started eager context refuses the fork (a stand-in context module)
    from nbworkers.distlib.compat import eager_context

    started = types.SimpleNamespace(_context_handle=object())
    monkeypatch.setitem(sys.modules, eager_context.CONTEXT_MODULE,
                        types.SimpleNamespace(context_safe=lambda: started))
    assert "TensorFlow's runtime has started" in (module.fork_refusal() or "")
    monkeypatch.delitem(sys.modules, eager_context.CONTEXT_MODULE)
    monkeypatch.setenv("NBWORKERS_FRAMEWORK", "tf")
    assert "tensorflow" in worker_frameworks.current().preload()


def test_a_jax_run_on_ray_forwards_the_shared_variables_and_asks_for_a_jax_zygote():
    from nbworkers.magics.backends.ray.backend import RayBackend
    from nbworkers.magics.backends.ray.options import RayOptions
    from nbworkers.magics.launch.spec import LaunchSpec

    spec = LaunchSpec(code="x = 1", framework="jax", framework_options={"cpu_devices": 2})
    backend = RayBackend.from_spec(spec, RayOptions(address="127.0.0.1:1"))
    python, forwarded = backend.zygote_request()
    assert (forwarded["NBWORKERS_FRAMEWORK"], forwarded["KERAS_BACKEND"], forwarded["JAX_NUM_CPU_DEVICES"]) == \
        ("jax", "jax", "2")
    per_worker = JAX.environment(plan_tasks(2), ["10.0.0.1", "10.0.0.2"], [1, 2], 1)
    env = worker_env({"PATH": "/bin"}, {}, per_worker, "-1", {}, shared=backend.shared)
    assert set(per_worker) | set(backend.shared) <= set(backend._worker_variables(env))
    tf_backend = RayBackend.from_spec(LaunchSpec(code="x = 1"), RayOptions(address="127.0.0.1:1"))
    assert tf_backend.zygote_request()[1]["NBWORKERS_FRAMEWORK"] == "tf"


def test_gloos_start_up_line_is_chatter_and_a_line_like_it_from_the_cell_is_not():
    from nbworkers.magics.run.noise import is_chatter, shown_log

    gloo = "[Gloo] Rank 1 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1"
    assert is_chatter(gloo, 2) and is_chatter(gloo, 1) and not is_chatter(gloo, 0)
    assert not is_chatter("[Gloo] what the cell printed", 2) and not is_chatter("loss 0.5", 2)
    launch = "--- nbworkers: worker 1, launch 0, TF_CPP_MIN_LOG_LEVEL=2, KERAS_DISTRIBUTION_JOB_ADDRESSES=h:1,h:2"
    assert shown_log("\n".join([launch, gloo, "DONE 2 1"])) == "DONE 2 1"


def test_a_framework_whose_modules_are_missing_is_refused_before_anything_starts(monkeypatch):
    from nbworkers.magics.frameworks import arguments

    arguments.check_installed(JAX, sys.executable)  # installed here (the jax extra)
    monkeypatch.setattr(arguments.importlib.util, "find_spec", lambda name: None if name == "jax" else object())
    with pytest.raises(LaunchError, match=r'--framework jax: jax is not installed .*pip install "nbworkers\[jax\]"'):
        arguments.check_installed(JAX, sys.executable)
    arguments.check_installed(JAX, "/usr/bin/python3-other")  # another interpreter: its worker says so itself
    arguments.check_installed(TF, sys.executable)
