"""The guard of tests/unit (tests/unit_boundary.py, installed by tests/unit/conftest.py) catches each thing a unit
test may not do: start a process (subprocess, os.fork, os.system, multiprocessing), start a kernel, connect past
loopback, leave TensorFlow/Keras imported, or do one of these and swallow the error. Nothing is started: every
trap raises before the real call. The last tests run the real conftest over a small suite (pytester, in this
process) and read which tests it fails and why.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import unit_boundary
from unit_boundary import BoundaryCrossed, guarded_phase, traps

UNIT_CONFTEST = Path(__file__).with_name("conftest.py")


def an_unloaded_heavy_module() -> str:
    """A TensorFlow/Keras top-level name this interpreter has not imported (to plant a stand-in under)."""
    free = [name for name in unit_boundary.HEAVY_MODULES if name not in sys.modules]
    if not free:
        pytest.skip("TensorFlow, Keras and tf_keras are all imported in this process (run tests/unit alone)")
    return free[0]


@pytest.mark.parametrize("start, says", [
    (lambda: subprocess.run(["true"]), "subprocess.Popen(['true'])"),
    (lambda: subprocess.Popen(args=["true"]), "subprocess.Popen(['true'])"),
    (lambda: os.system("true"), "os.system('true',)"),
    (lambda: os.fork(), "os.fork()"),
    (lambda: os.posix_spawn("/bin/true", ["true"], {}), "os.posix_spawn('/bin/true'"),
    (lambda: multiprocessing.Process(target=print, name="stray").start(), "multiprocessing Process.start (stray)"),
    (lambda: multiprocessing.get_context("spawn").Process(target=print, name="s").start(), "SpawnProcess.start (s)"),
], ids=["subprocess.run", "Popen", "os.system", "os.fork", "posix_spawn", "multiprocessing", "spawn-context"])
def test_every_way_of_starting_a_process_is_refused_before_it_starts(start, says):
    crossed: list[str] = []
    with traps(crossed), pytest.raises(BoundaryCrossed, match="move the test to tests/integration"):
        start()
    assert len(crossed) == 1 and crossed[0].startswith("starts a process: ") and says in crossed[0], crossed


def test_starting_a_kernel_is_refused_with_its_own_words():
    from ipykernel.inprocess.manager import InProcessKernelManager
    from jupyter_client.manager import AsyncKernelManager, KernelManager
    from jupyter_client.provisioning import LocalProvisioner

    crossed: list[str] = []
    with traps(crossed):
        for manager in (KernelManager(), AsyncKernelManager(), InProcessKernelManager()):
            with pytest.raises(BoundaryCrossed, match="starts a kernel"):
                manager.start_kernel()
        with pytest.raises(BoundaryCrossed, match="starts a kernel: LocalProvisioner.launch_kernel"):
            LocalProvisioner.launch_kernel(None, ["python"])  # the path every jupyter_client manager takes
    assert crossed == ["starts a kernel: KernelManager.start_kernel", "starts a kernel: AsyncKernelManager.start_kernel",
                       "starts a kernel: InProcessKernelManager.start_kernel",
                       "starts a kernel: LocalProvisioner.launch_kernel"]


def test_a_loopback_socket_is_fine_and_any_other_address_is_refused():
    crossed: list[str] = []
    with socket.create_server(("127.0.0.1", 0)) as server, traps(crossed):
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)), socket.create_connection(("localhost", port)):
            pass
        outside = socket.socket()
        with outside, pytest.raises(BoundaryCrossed, match=r"192\.0\.2\.1"):
            outside.connect(("192.0.2.1", 80))  # TEST-NET-1: never routed; refused before any packet
        with socket.socket() as named, pytest.raises(BoundaryCrossed, match="example.org"):
            named.connect_ex(("example.org", 80))
    assert len(crossed) == 2, crossed


def test_the_traps_are_gone_after_the_phase():
    originals = (subprocess.Popen.__init__, os.fork, os.system, multiprocessing.process.BaseProcess.start,
                 socket.socket.connect)
    with traps([]):
        assert subprocess.Popen.__init__ is not originals[0] and os.fork is not originals[1]
    assert (subprocess.Popen.__init__, os.fork, os.system, multiprocessing.process.BaseProcess.start,
            socket.socket.connect) == originals


def run_phase(item: pytest.Item, body) -> None:
    """Drive ``guarded_phase`` as pluggy does: enter, run ``body`` as the phase, then let the guard judge."""
    phase = guarded_phase(item)
    next(phase)
    body()
    with pytest.raises(StopIteration):
        phase.send(None)


def test_a_phase_that_leaves_tensorflow_imported_fails(request):
    name = an_unloaded_heavy_module()
    try:
        with pytest.raises(pytest.fail.Exception, match=rf"imports {name} \(it stays in sys.modules\)"):
            run_phase(request.node, lambda: sys.modules.__setitem__(name, types.ModuleType(name)))
    finally:
        sys.modules.pop(name, None)  # the stand-in goes before this test's own guard looks


def test_a_phase_that_swallows_the_refusal_still_fails(request):
    def swallow():
        try:
            subprocess.run(["true"])
        except BoundaryCrossed:
            pass

    with pytest.raises(pytest.fail.Exception, match=r"subprocess.Popen\(\['true'\]\) \(the test caught BoundaryCrossed\)"):
        run_phase(request.node, swallow)


def test_a_clean_phase_passes_and_a_run_where_tensorflow_came_first_warns_once(request, monkeypatch):
    run_phase(request.node, lambda: None)
    name = an_unloaded_heavy_module()
    with monkeypatch.context() as patch:  # undone before this test's own guard looks
        patch.setitem(sys.modules, name, types.ModuleType(name))
        patch.setattr(unit_boundary, "_warned_blind", [])
        with pytest.warns(pytest.PytestWarning, match="blind in this run"):
            run_phase(request.node, lambda: None)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            run_phase(request.node, lambda: None)  # once per run: no second warning


SUITE = '''
import multiprocessing, os, subprocess, sys, types

import pytest


def test_clean():
    assert sum(range(4)) == 6


def test_process():
    subprocess.run(["true"], check=True)


def test_fork():
    if os.fork() == 0:
        os._exit(0)


def test_multiprocessing():
    multiprocessing.Process(target=print).start()


def test_kernel():
    from jupyter_client.manager import KernelManager

    KernelManager().start_kernel()


def test_network():
    import socket

    socket.create_connection(("192.0.2.1", 80), timeout=1)


def test_tensorflow():
    sys.modules["{heavy}"] = types.ModuleType("{heavy}")


def test_swallowed():
    try:
        subprocess.run(["true"])
    except Exception:
        pass


@pytest.fixture
def server():
    return subprocess.Popen(["sleep", "60"])


def test_fixture_that_starts_a_process(server):
    pass
'''


def test_the_real_conftest_fails_each_kind_of_test_that_belongs_in_integration(pytester):
    heavy = an_unloaded_heavy_module()
    pytester.makeconftest(UNIT_CONFTEST.read_text())
    pytester.makepyfile(test_suite=SUITE.replace("{heavy}", heavy))
    try:
        recorded = pytester.inline_run("-p", "no:cacheprovider")  # in this process
    finally:
        sys.modules.pop(heavy, None)
    reports = recorded.getreports("pytest_runtest_logreport")
    assert [r.nodeid.split("::")[1] for r in reports if r.passed and r.when == "call"] == ["test_clean"]
    failed = {r.nodeid.split("::")[1]: r for r in reports if r.failed}
    says = {
        "test_process": "BoundaryCrossed: starts a process: subprocess.Popen(['true'])",
        "test_fork": "BoundaryCrossed: starts a process: os.fork()",
        "test_multiprocessing": "BoundaryCrossed: starts a process: multiprocessing Process.start",
        "test_kernel": "BoundaryCrossed: starts a kernel: KernelManager.start_kernel",
        "test_network": "BoundaryCrossed: socket.connect to ('192.0.2.1', 80) (not loopback)",
        "test_tensorflow": f"test_suite.py::test_tensorflow: imports {heavy} (it stays in sys.modules)",
        "test_swallowed": "starts a process: subprocess.Popen(['true']) (the test caught BoundaryCrossed)",
        "test_fixture_that_starts_a_process": "BoundaryCrossed: starts a process: subprocess.Popen(['sleep', '60'])",
    }
    assert sorted(failed) == sorted(says)
    for name, text in says.items():
        assert text in failed[name].longreprtext and "move the test to tests/integration" in failed[name].longreprtext
    assert failed["test_fixture_that_starts_a_process"].when == "setup"  # fixtures are guarded too
