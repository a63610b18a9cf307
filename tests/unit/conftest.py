"""tests/unit: fast tests of one piece each. No process, no kernel, no TensorFlow/Keras, no network beyond loopback.

The rule is enforced, not hoped: every phase (setup, call, teardown) of every test here runs inside
``unit_boundary.guarded_phase``. A test that starts a process (``subprocess``, ``os.fork``/``system``/``posix_spawn``,
``multiprocessing``), starts a kernel (jupyter_client, ipykernel's in-process kernel) or connects a socket to a
non-loopback address fails at that call, before anything starts; one that leaves ``tensorflow``, ``keras`` or
``tf_keras`` newly imported fails too. Such a test belongs in tests/integration (tests/unit/test_unit_boundary.py
proves the guard catches each).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from unit_boundary import guarded_phase


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from guarded_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from guarded_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    return (yield from guarded_phase(item))
