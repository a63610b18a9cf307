"""■ while a cell without --block left workers running and the kernel is idle (magics/notebook/idle_interrupt.py):
one line saying how to stop them, under the cell that started them. With fakes for ipykernel's kernel; the real
kernel: tests/integration/test_sessions_browser.py."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from nbworkers.magics.notebook import idle_interrupt, registry


def _run(name: str, done: bool = False):
    return SimpleNamespace(name=name, done=done)


def _session(name: str, *cells_done: bool):
    cells = [SimpleNamespace(number=i + 1, label=f"cell {i + 1}", done=done) for i, done in enumerate(cells_done)]
    return SimpleNamespace(name=name, done=False, cells=cells)


class FakeKernel:
    def __init__(self, saved=signal.SIG_IGN):
        self.saved_sigint_handler = saved
        self.sent: list[tuple] = []
        self.session = SimpleNamespace(send=lambda socket, kind, content, parent, ident: self.sent.append(
            (kind, content["text"], parent["header"]["msg_id"])))
        self.iopub_socket = object()
        self.parent = {"header": {"msg_id": "cell-1"}}

    def get_parent(self, channel):
        return self.parent

    def _topic(self, topic):
        return topic.encode()


def test_the_hint_names_each_running_thing_and_how_to_stop_it():
    hint = idle_interrupt.stop_hint([_session("train", True, False, False), _run("r1"), _run("old", done=True),
                                     _session("idle", True)])
    assert hint.startswith("nbworkers: ■ interrupts this kernel, not the workers") and "\n" not in hint
    assert "session train's cell 2: its widget's Stop or `%workers stop train --cell`" in hint
    assert "run r1: its widget's Stop or `%workers stop r1`" in hint
    assert "old" not in hint and "idle" not in hint
    assert idle_interrupt.stop_hint([_run("old", done=True), _session("idle", True)]) == ""


@pytest.fixture
def clusters(monkeypatch):
    running: list = []
    monkeypatch.setattr(registry, "running", lambda: list(running))
    monkeypatch.setattr(idle_interrupt, "_cells", {})
    return running


def test_between_cells_sigint_prints_the_hint_under_the_newest_cell_that_started_a_running_thing(clusters):
    kernel = FakeKernel()
    shell = SimpleNamespace(kernel=kernel)
    clusters.append(_session("train", False))
    assert idle_interrupt.watch(shell, "train") and kernel.saved_sigint_handler is idle_interrupt.on_idle_interrupt
    kernel.parent = {"header": {"msg_id": "cell-2"}}
    clusters.append(_run("r1"))
    assert idle_interrupt.watch(shell, "r1")  # a second cell: already ours, the hint now goes under it
    idle_interrupt.on_idle_interrupt(signal.SIGINT, None)
    [(kind, text, parent)] = kernel.sent
    assert kind == "stream" and parent == "cell-2" and "train --cell" in text and "`%workers stop r1`" in text
    clusters[:] = [clusters[0]]  # r1 ended: the hint goes under the cell that started train
    idle_interrupt.on_idle_interrupt(signal.SIGINT, None)
    assert kernel.sent[-1][2] == "cell-1" and "r1" not in kernel.sent[-1][1]
    clusters.clear()  # nothing runs: ignored, as ipykernel's SIG_IGN would
    idle_interrupt.on_idle_interrupt(signal.SIGINT, None)
    assert len(kernel.sent) == 2


def test_a_users_own_handler_and_a_shell_without_ipykernel_are_left_alone(clusters):
    def mine(signum, frame):
        pass

    kernel = FakeKernel(saved=mine)
    assert not idle_interrupt.watch(SimpleNamespace(kernel=kernel), "r1") and kernel.saved_sigint_handler is mine
    assert not idle_interrupt.watch(SimpleNamespace(), "r1")  # a terminal IPython: no kernel
    assert not idle_interrupt.watch(None, "r1")
