"""A detached session's channel (magics/sessions/detach/): the supervisor's server and handlers, a kernel's client
and its RemoteCell, over a real Unix socket with a fake session in place of the real one (no process)."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from detach_fakes import FakeSession

from nbworkers.magics.errors import RunFailed
from nbworkers.magics.sessions.detach import wire as channel
from nbworkers.magics.sessions.detach.client import SessionClient, SessionGone, SessionRefused
from nbworkers.magics.sessions.detach.handlers import handle
from nbworkers.magics.sessions.detach.remote_cell import RemoteCell
from nbworkers.magics.sessions.detach.server import SessionServer
from nbworkers.magics.sessions.detach.supervisor import SessionLoop
from nbworkers.magics.views.rich import RichItem
from nbworkers.protocol.statuses import CellState


@pytest.fixture
def served(tmp_path):
    session = FakeSession()
    server = SessionServer("s", tmp_path, lambda kind, content, blobs: handle(session, kind, content, blobs))
    server.start()
    yield session, server, SessionClient("s", tmp_path)
    server.close()


def _owner(client: SessionClient) -> Any:
    return SimpleNamespace(name="s", client=client, settings=SimpleNamespace(flush_interval=0.01), done=False,
                           interrupt=lambda cell=None: client.request("interrupt", {"number": cell.number})[0]["answer"],
                           restart=lambda: None)


def test_socket_and_client_file_are_private_and_gone_after_close(served, tmp_path):
    session, server, client = served
    assert stat.S_IMODE(os.stat(server.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / channel.CLIENT_FILE).st_mode) == 0o600
    assert channel.read_client_file(tmp_path) == (str(server.path), server.key)
    server.close()
    assert not server.path.exists() and not (tmp_path / channel.CLIENT_FILE).exists()
    with pytest.raises(SessionGone) as gone:
        client.request("info", {})
    assert gone.value.ended and "has ended" in str(gone.value)


def test_a_cell_is_followed_to_its_value_with_its_outputs(served):
    session, server, client = served
    answer, _ = client.request("submit", {"code": "print(x + 1)", "timeout": None, "display": "0"})
    assert answer["number"] == 1 and answer["label"] == "cell 1" and session.cells[0].code == "print(x + 1)"
    cell = RemoteCell(_owner(client), 1, "print(x + 1)")
    cell.fetch()
    assert cell.state == "queued" and not cell.done and cell.snapshot()["session"]["cell"] == 1
    fake = session.cells[0]
    fake.outputs = [RichItem(w % 2, {"text/plain": f"out {w}"}) for w in range(25)]  # more than one answer holds
    fake.finish()
    assert cell.wait(timeout=5) is True
    assert [item.data["text/plain"] for item in cell.outputs] == [f"out {w}" for w in range(25)]
    assert cell.state == "finished" and repr(cell.value) == "42"


def test_a_failed_cell_raises_run_failed_with_the_error(served):
    session, server, client = served
    client.request("submit", {"code": "1/0"})
    cell = RemoteCell(_owner(client), 1, "1/0").start()
    session.cells[0].finish("failed", "worker 1: ZeroDivisionError: division by zero\nTraceback ...")
    with pytest.raises(RunFailed, match="ZeroDivisionError"):
        cell.wait(timeout=5)
    assert cell.failed_workers == (1,)


def test_a_cell_whose_supervisor_is_gone_is_lost(served):
    session, server, client = served
    client.request("submit", {"code": "x"})
    owner = _owner(client)
    cell = RemoteCell(owner, 1, "x").start()
    server.close()
    owner.done = True  # its run is over (state.json): a failed request is not retried
    assert cell.wait(timeout=5, raise_on_failure=False) is True
    assert cell.state == CellState.LOST and "detached session 's'" in cell.error


def test_stop_reaches_the_session(served):
    session, server, client = served
    client.request("submit", {"code": "x"})
    RemoteCell(_owner(client), 1, "x").stop()
    assert session.interrupted == [session.cells[0]]


def test_pull_and_push_travel_as_json_and_npy(served):
    session, server, client = served
    from nbworkers.protocol import session_values

    answer, blobs = client.request("pull", {"expression": "x", "worker": 0})
    value = session_values.decode(answer["value"], blobs)
    assert value["x"] == 41 and value["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
    tree, frames = session_values.encode({"a": np.ones(3)})
    assert client.request("push", {"values": tree, "workers": [1]}, frames)[0]["workers"] == [1]
    assert session.pushed[0][0] == [1] and session.pushed[0][1]["a"].tolist() == [1, 1, 1]
    with pytest.raises(SessionRefused, match="NameError"):
        client.request("pull", {"expression": "boom"})


def test_refusals_say_why(served):
    session, server, client = served
    session.ended = True
    with pytest.raises(SessionRefused) as refused:
        client.request("submit", {"code": "x"})
    assert refused.value.ended and "start it again" in str(refused.value)
    with pytest.raises(SessionRefused, match="unknown request"):
        client.request("rm -rf", {})
    with pytest.raises(SessionRefused, match="no cell 7"):
        client.request("cell", {"number": 7})
    with pytest.raises(SessionRefused, match="malformed"):
        client.request("submit", {"code": 3})


def test_a_message_signed_with_another_key_is_refused(served, tmp_path):
    session, server, client = served
    channel.write_client_file(tmp_path, server.path, "00" * 32)  # the right socket, the wrong key
    with pytest.raises(SessionGone):
        client.request("submit", {"code": "x"})
    assert session.cells == []


def test_a_frame_count_or_size_over_the_bounds_is_refused_before_it_is_read():
    import socket

    left, right = socket.socketpair()
    with left, right:
        left.sendall(channel.COUNT.pack(channel.MAX_FRAMES + 1))
        with pytest.raises(channel.ChannelError, match="frames"):
            channel.receive(right, "00" * 32, 1024)
        left.sendall(channel.COUNT.pack(7) + channel.LENGTH.pack(1 << 40))
        with pytest.raises(channel.ChannelError, match="bytes"):
            channel.receive(right, "00" * 32, 1024)


def test_session_loop_serves_while_the_session_runs(tmp_path):
    done = threading.Event()
    started: list[str] = []
    cluster = SimpleNamespace(detached=False, stop=lambda: started.append("stop"), wait_done=done.wait)
    session = SimpleNamespace(name="s", run_dir=tmp_path, cluster=cluster, start=lambda: started.append("session"))

    class FakeServer:
        def __init__(self, name: str, run_dir: Path, handler: Any):
            self.handler, self.closed = handler, False

        def start(self) -> None:
            started.append("server")

        def close(self) -> None:
            self.closed = True

    loop = SessionLoop(session, FakeServer)
    loop.detached = True
    loop.start()
    assert session.cluster.detached and started == ["session", "server"]
    assert loop.wait_done(0.01) is False
    loop.stop()  # a signal to the supervisor: the session's run stops
    done.set()
    assert started[-1] == "stop" and loop.wait_done(0.01) is True
    loop.close()
    assert loop.server.closed


def test_the_cell_picture_is_json_even_with_nan(served):
    session, server, client = served
    client.request("submit", {"code": "x"})
    answer, blobs = client.request("cell", {"number": 1})
    assert json.loads(bytes(blobs[0]))["snapshot"]["session"]["cell"] == 1 and answer["state"] == "queued"
