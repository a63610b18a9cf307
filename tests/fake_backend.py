"""A backend from outside nbworkers: the proof that a new backend is one module and one registration.

``FAKE`` is its registration (``nbworkers.magics.backends.registry.register(FAKE)`` in a kernel, as an entry point
of the group ``nbworkers.backends`` would do at install). It runs the workers on this machine by wrapping the local
backend through the protocol alone (``magics/shapes.py``'s ``Backend``), names each worker's node
``<--fake-node>-<index>`` and makes no private network namespace. Its one flag, ``--fake-node NAME``, fills its
options dataclass; its check refuses a name with a space.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nbworkers.magics.backends.isolation import no_namespace
from nbworkers.magics.backends.local import LocalBackend
from nbworkers.magics.backends.registry import BackendKind, Flag
from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.shapes import IsolationFact, Placement, PlannedTask, RelayKeys, WorkerHandle


@dataclass(frozen=True)
class FakeOptions:
    fake_node: str = "fakenode"  # --fake-node: the prefix of each worker's node label


class FakeBackend:
    """Every worker a local process (a LocalBackend without isolation), on a node of its own name."""

    name = "fake"
    encrypt_relay = False

    def __init__(self, options: FakeOptions) -> None:
        self.options = options
        self.local = LocalBackend(isolation="off")
        self.launched: list[int] = []

    def relay_hosts(self) -> tuple[str, str | None]:
        return self.local.relay_hosts()

    def attach_relay(self, relay: RelayKeys) -> None:
        self.local.attach_relay(relay)

    def capacity(self) -> int:
        return self.local.capacity()

    def isolation_fact(self) -> IsolationFact:
        return no_namespace(self.name)

    def plan(self, tasks: Sequence[PlannedTask], gpus_per_worker: int | None) -> list[Placement]:
        return self.local.plan(tasks, gpus_per_worker)

    def launch(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path, grace: float,
               role: str = "worker") -> WorkerHandle:
        handle = self.local.launch(index, python, env, cwd, log_path, grace, role)
        handle.node_label = f"{self.options.fake_node}-{index}"
        self.launched.append(index)
        return handle

    def close(self) -> None:
        self.local.close()


def check(options: FakeOptions) -> None:
    if not options.fake_node or " " in options.fake_node:
        raise LaunchError(f"--fake-node {options.fake_node!r}: give a name without spaces.")


def create(spec: LaunchSpec, options: FakeOptions) -> FakeBackend:
    return FakeBackend(options)


FAKE: BackendKind[FakeOptions] = BackendKind(
    name="fake", title="fake", summary="a fake backend of the tests", options=FakeOptions, create=create,
    check=check, flags=(Flag("--fake-node", {"default": "fakenode", "metavar": "NAME",
                                               "help": "the prefix of each worker's node label"}),),
    can_detach=False, elastic=False, runs_here=True)
