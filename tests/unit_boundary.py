"""What a unit test may not do, checked rather than hoped: start a process, start a kernel, import TensorFlow or
Keras, or reach a network address other than loopback.

``tests/unit/conftest.py`` wraps every phase (setup, call, teardown) of every test under ``tests/unit`` in
``guarded_phase``: while the phase runs, ``traps`` replaces the ways of starting a process (``subprocess.Popen``,
``os.fork``/``forkpty``/``posix_spawn``/``system``, ``multiprocessing`` starts), of starting a kernel
(jupyter_client's provisioner and kernel managers, ipykernel's in-process kernel) and of connecting a socket to a
non-loopback address with functions that record what was attempted and raise ``BoundaryCrossed`` instead, before
anything starts. A test that swallows that exception still fails: the phase fails when anything was recorded.
TensorFlow and Keras are found afterwards: a phase that leaves one of them newly in ``sys.modules`` fails.

Such a test belongs in ``tests/integration``; the message says so.
"""

from __future__ import annotations

import ipaddress
import multiprocessing.process
import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

import pytest

HEAVY_MODULES = ("tensorflow", "keras", "tf_keras")
MOVE_HINT = "a unit test must not do this; move the test to tests/integration"
OS_PROCESS_STARTERS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "popen")


class BoundaryCrossed(Exception):
    """A unit test started a process or a kernel, or reached the network: only an integration test may."""


def heavy_modules_loaded() -> set[str]:
    """The TensorFlow/Keras top-level modules imported in this interpreter so far."""
    return {name for name in HEAVY_MODULES if name in sys.modules}


def _refuser(crossed: list[str], what: Callable[..., str]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempt = what(*args, **kwargs)
        crossed.append(attempt)
        raise BoundaryCrossed(f"{attempt}: {MOVE_HINT}")

    return refuse


def _is_loopback(address: Any) -> bool:
    """True for a Unix socket path or an (IP literal or 'localhost', port) on the loopback interface."""
    if not isinstance(address, tuple):
        return True  # AF_UNIX path (str/bytes): stays on this machine
    host = address[0]
    if isinstance(host, bytes):
        host = host.decode()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: resolving it may already leave the machine


def _socket_guard(crossed: list[str], method: Callable[..., Any], name: str) -> Callable[..., Any]:
    def connect(sock: socket.socket, address: Any, *args: Any) -> Any:
        if _is_loopback(address):
            return method(sock, address, *args)
        crossed.append(f"socket.{name} to {address!r} (not loopback)")
        raise BoundaryCrossed(f"socket.{name} to {address!r} (not loopback): {MOVE_HINT}")

    return connect


def _kernel_starters() -> list[tuple[Any, str]]:
    """(class, method) pairs that start a kernel, from the libraries that are installed."""
    starters: list[tuple[Any, str]] = []
    try:
        from jupyter_client.manager import AsyncKernelManager, KernelManager
        from jupyter_client.provisioning import LocalProvisioner
    except ImportError:
        pass
    else:
        starters += [(KernelManager, "start_kernel"), (AsyncKernelManager, "start_kernel"),
                     (LocalProvisioner, "launch_kernel")]
    try:
        from ipykernel.inprocess.manager import InProcessKernelManager
    except ImportError:
        pass
    else:
        starters.append((InProcessKernelManager, "start_kernel"))
    return starters


@contextmanager
def traps(crossed: list[str]) -> Iterator[None]:
    """While inside: every process start, kernel start or non-loopback connect appends to ``crossed`` and raises."""
    with ExitStack() as stack:
        def patch(target: Any, name: str, new: Any) -> None:
            stack.enter_context(mock.patch.object(target, name, new))

        patch(subprocess.Popen, "__init__", _refuser(
            crossed, lambda _self, args, *_a, **_k: f"starts a process: subprocess.Popen({args!r})"))
        for name in OS_PROCESS_STARTERS:
            if hasattr(os, name):
                patch(os, name, _refuser(crossed, lambda *a, _name=name, **_k: f"starts a process: os.{_name}{a!r}"))
        patch(multiprocessing.process.BaseProcess, "start", _refuser(
            crossed, lambda proc: f"starts a process: multiprocessing {type(proc).__name__}.start ({proc.name})"))
        for owner, name in _kernel_starters():
            patch(owner, name, _refuser(
                crossed, lambda *_a, _where=f"{owner.__name__}.{name}", **_k: f"starts a kernel: {_where}"))
        for name in ("connect", "connect_ex"):
            patch(socket.socket, name, _socket_guard(crossed, getattr(socket.socket, name), name))
        yield


def heavy_import_message(new: set[str]) -> str:
    return (f"imports {', '.join(sorted(new))} (it stays in sys.modules): {MOVE_HINT}, or keep the import out of "
            "the code path it tests")


_warned_blind: list[bool] = []


def guarded_phase(item: pytest.Item) -> Generator[None, Any, Any]:
    """A pluggy wrapper body for one runtest phase of ``item`` (see tests/unit/conftest.py)."""
    before = heavy_modules_loaded()
    if before and not _warned_blind:
        _warned_blind.append(True)
        warnings.warn(pytest.PytestWarning(
            f"{', '.join(sorted(before))} was imported before this unit test ran (by collecting integration tests?):"
            " the check that unit tests do not import it is blind in this run. Run tests/unit alone (make test-fast)"
            " for that check."), stacklevel=1)
    crossed: list[str] = []
    with traps(crossed):
        result = yield  # re-raises the phase's own failure, BoundaryCrossed included
    if crossed:
        pytest.fail(f"{item.nodeid}: {'; '.join(crossed)} (the test caught BoundaryCrossed): {MOVE_HINT}",
                    pytrace=False)
    if new := heavy_modules_loaded() - before:
        pytest.fail(f"{item.nodeid}: {heavy_import_message(new)}", pytrace=False)
    return result
