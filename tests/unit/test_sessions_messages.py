"""Sessions (``%%worker --session``: workers that keep their state between cells) without TensorFlow: the command
signatures, the kernel's command socket, the value encoding and the pull decoder's refusals, and how a session
routes worker output to its cells. A live session of plain-Python workers:
tests/integration/test_sessions_plain_python.py."""

from __future__ import annotations

import base64
import io
import pickle
import sys
import time

import numpy as np
import pytest
import zmq

from nbworkers.magics.sessions.channel import CommandChannel
from nbworkers.magics.sessions.pull import PullError, PullRequest, decode, read_npy
from nbworkers.protocol import session_values, session_wire, wire


def test_commands_verify_only_with_the_right_key_and_untouched():
    key = wire.new_key()
    frames = wire.Signer(key).frames("run", {"seq": 1, "gen": 0, "cell": 1, "code": "x = 1"})
    assert session_wire.verify(frames, key) == ("run", {"seq": 1, "gen": 0, "cell": 1, "code": "x = 1"})
    assert session_wire.verify(frames, wire.new_key()) is None  # another key
    tampered = list(frames)
    tampered[-1] = tampered[-1].replace(b"x = 1", b"import os; os.remove('x')")
    assert session_wire.verify(tampered, key) is None
    unsigned = list(frames)
    unsigned[1] = b""
    assert session_wire.verify(unsigned, key) is None
    assert session_wire.verify(frames[:-1], key) is None  # framing
    assert session_wire.verify(wire.Signer(key).frames("exec_anything", {"seq": 2, "gen": 0}), key) is None


def test_the_command_socket_ignores_unsigned_ready_frames():
    key = wire.new_key()
    channel = CommandChannel(key)
    context = zmq.Context()
    try:
        intruder = context.socket(zmq.DEALER)
        intruder.setsockopt(zmq.LINGER, 0)
        intruder.connect(channel.address)
        intruder.send_multipart(wire.Signer(wire.new_key()).frames("ready", {"worker": 0, "gen": 0}))
        worker = context.socket(zmq.DEALER)
        worker.setsockopt(zmq.LINGER, 0)
        worker.connect(channel.address)
        worker.send_multipart(wire.Signer(key).frames("ready", {"worker": 1, "gen": 0}))
        deadline = time.monotonic() + 10
        while channel.ready_workers() != {1} and time.monotonic() < deadline:
            channel.drain()
            time.sleep(0.02)
        assert channel.ready_workers() == {1} and channel.dropped == 1
        assert channel.send("run", cell=1, code="x = 1") == [1]  # only the signed worker gets commands
        assert intruder.poll(300) == 0
        kind, content = session_wire.verify(worker.recv_multipart(), key)
        assert kind == "run" and content["code"] == "x = 1" and content["seq"] == 1
        channel.new_generation(1)  # a restart: old peers get nothing more
        assert channel.send("run", cell=2, code="y = 2") == []
    finally:
        intruder.close()
        worker.close()
        context.term()
        channel.close()


def test_values_encode_to_json_and_npy_and_decode_back():
    class History:  # duck-typed like keras.callbacks.History
        epoch = [0, 1]
        history = {"loss": [0.5, 0.25]}

    value = {"a": np.arange(6).reshape(2, 3), "h": History(), "n": [1, None, "s", float("inf")],
             "t": (np.float32(1.5), np.bool_(True))}
    tree, blobs = session_values.encode(value)
    out = decode({"value": tree, "blobs": [len(b) for b in blobs]}, b"".join(blobs))
    assert out["a"].tolist() == [[0, 1, 2], [3, 4, 5]] and out["h"] == {"loss": [0.5, 0.25]}
    assert out["n"] == [1, None, "s", float("inf")] and out["t"] == [1.5, True]
    for bad in (object(), {1: "int key"}, np.array([object()], dtype=object), {session_values.TAG: 1}):
        with pytest.raises(session_values.PullValueError):
            session_values.encode(bad)


def _npy(array, allow_pickle=False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def test_the_decoder_refuses_pickles_and_malformed_replies():
    with pytest.raises(PullError, match="pickles are never loaded"):
        read_npy(pickle.dumps([1, 2]))
    with pytest.raises(PullError, match="bad .npy data"):
        read_npy(_npy(np.array([{"a": 1}], dtype=object), allow_pickle=True))
    with pytest.raises(PullError, match="do not add up"):
        decode({"value": 1, "blobs": [5]}, b"abc")
    with pytest.raises(PullError, match="unknown encoded value"):
        decode({"value": {session_values.TAG: "array", "blob": 3}, "blobs": []}, b"")

    def reply(**fields):
        content = {"request": "r", "index": 0, "count": 1, "size": 0, "data": "", "meta": {"value": 1, "blobs": []},
                   "error": None, "worker": 0, "gen": 0}
        content.update(fields)
        return content

    def fed(*contents, max_bytes=1000):
        request = PullRequest("r", 0, 0, max_bytes)
        for content in contents:
            request.feed(content)
        return request

    assert fed(reply()).result(1) == 1
    with pytest.raises(PullError, match="pull limit"):
        fed(reply(size=10**9, count=2)).result(1)
    with pytest.raises(PullError, match="out of order"):
        fed(reply(index=1, count=2)).result(1)
    with pytest.raises(PullError, match="not base64"):
        fed(reply(size=3, data="@@@@", meta={"value": 1, "blobs": [3]})).result(1)
    with pytest.raises(PullError, match="more bytes than announced"):
        fed(reply(size=1, data=base64.b64encode(b"abcd").decode(), count=2)).result(1)
    with pytest.raises(PullError, match="no reply"):
        fed().result(0.05)
    assert session_wire.validate("pull", reply(count=0)) is not None
    assert session_wire.validate("pull", reply(meta="x")) is not None
    assert session_wire.validate("cell", {"event": "end", "cell": 1, "status": "exploded"}) is not None


def test_output_goes_to_the_cell_that_printed_it_even_when_a_marker_is_split(tmp_path):
    from nbworkers.magics.launch.spec import LaunchSpec
    from nbworkers.magics.sessions.cell import LogRouter, SessionCell
    from nbworkers.magics.sessions.core import CellRecord
    from nbworkers.magics.sessions.session import Session
    from nbworkers.magics.settings import WorkerSettings

    session = Session(LaunchSpec(code="x = 1", workers=2, name="route", python=sys.executable, cwd=str(tmp_path)),
                      WorkerSettings(run_root=str(tmp_path / "runs")))
    cells = [SessionCell(session, CellRecord(1), "a"), SessionCell(session, CellRecord(2), "b")]
    router = LogRouter()
    assert router.route(cells, 0, "before\n" + session_wire.marker(1, "start") + "hello\n--- nbworkers: ce") == []
    assert router.route(cells, 0, "ll 1 end ---\nbetween cells\n" + session_wire.marker(2, "start") + "wor") == [1]
    router.route(cells, 0, "ld\n")
    assert router.route(cells, 1, session_wire.marker(2, "start") + "other worker\n" + session_wire.marker(2, "end")) == [2]
    assert cells[0].workers[0].log_tail.lines() == ["hello"]
    assert cells[1].workers[0].log_tail.lines() == ["world"]
    assert cells[1].workers[1].log_tail.lines() == ["other worker"]

