"""Sessions (``%%worker --session``: workers that keep their state between cells) without TensorFlow: the command
signatures, the kernel's command socket, the value encoding and the pull decoder's refusals, and how a session
routes worker output to its cells. A live session of plain-Python workers:
tests/integration/test_sessions_plain_python.py."""

from __future__ import annotations

import io
import pickle
import sys
import time

import numpy as np
import pytest
import zmq

from nbworkers.magics.sessions.channel import CommandChannel
from nbworkers.magics.sessions.data import DataChannel
from nbworkers.magics.settings import settings
from nbworkers.protocol import session_data, session_values, session_wire, wire
from nbworkers.protocol.session_values import ValueDecodeError, decode, read_npy


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
    out = decode(tree, [bytes(b) for b in blobs])
    assert out["a"].tolist() == [[0, 1, 2], [3, 4, 5]] and out["h"] == {"loss": [0.5, 0.25]}
    assert out["n"] == [1, None, "s", float("inf")] and out["t"] == [1.5, True]
    for bad in (object(), {1: "int key"}, np.array([object()], dtype=object), {session_values.TAG: 1}):
        with pytest.raises(session_values.PullValueError):
            session_values.encode(bad)


def test_arrays_of_every_layout_come_back_equal_as_views_of_the_received_memory():
    arrays = [np.arange(12.0).reshape(3, 4), np.asfortranarray(np.arange(12).reshape(3, 4)), np.arange(10)[::3],
              np.array(["ab", "c"]), np.zeros((0, 3), np.float32), np.zeros(2, dtype=[("x", "<i4"), ("y", "<f8")])]
    tree, blobs = session_values.encode(arrays)
    received = [bytearray(b) for b in blobs]  # writable, as a zmq frame's memory is
    out = decode(tree, received)
    for sent, back in zip(arrays, out):
        assert back.dtype == sent.dtype and back.shape == sent.shape and np.array_equal(back, sent)
    assert np.shares_memory(out[0], np.frombuffer(received[1], np.uint8))  # no copy on the way in


def test_pickles_only_with_allow_pickle_and_never_in_the_kernels_decoder():
    with pytest.raises(session_values.PullValueError, match="cannot be pulled"):
        session_values.encode({"f": complex(1, 2)})
    tree, blobs = session_values.encode({"f": complex(1, 2)}, allow_pickle=True)
    assert decode(tree, blobs, allow_pickle=True) == {"f": complex(1, 2)}
    with pytest.raises(ValueDecodeError, match="pickles are never loaded"):
        decode(tree, blobs)


def test_data_messages_check_signature_mac_sizes_and_the_cap():
    key = wire.new_key()
    signer = wire.Signer(key)
    payload = [b"header", memoryview(np.arange(1000, dtype=np.float32)).cast("B")]
    frames = session_data.pack(key, signer, "pull", {"request": "r"}, payload)
    kind, content, blobs = session_data.unpack(frames, key, max_bytes=10_000)
    assert kind == "pull" and content["request"] == "r" and [b.tobytes() for b in blobs] == [bytes(p) for p in payload]
    with pytest.raises(session_data.DataError, match="more than the limit"):
        session_data.unpack(frames, key, max_bytes=1000)
    with pytest.raises(session_data.DataError, match="does not match the signed MAC"):
        session_data.unpack(frames[:-1] + [bytes(4000)], key, max_bytes=10_000)
    with pytest.raises(session_data.DataError, match="do not match the sizes"):
        session_data.unpack(frames[:-1], key, max_bytes=10_000)
    with pytest.raises(session_data.DataError, match="bad signature"):
        session_data.unpack(frames, wire.new_key(), max_bytes=10_000)
    other = wire.new_key()  # signed by someone else with their own key: refused as well
    with pytest.raises(session_data.DataError, match="bad signature"):
        session_data.unpack(session_data.pack(other, wire.Signer(other), "pull", {}, payload), key, max_bytes=10_000)
    assert frames[5] != session_data.pack(key, signer, "pull", {"request": "r"}, payload)[5]  # a new nonce each time
    forged = list(frames)
    forged[5] = forged[5].replace(b'"r"', b'"s"')
    with pytest.raises(session_data.DataError, match="bad signature"):
        session_data.unpack(forged, key, max_bytes=10_000)
    with pytest.raises(session_data.DataError, match="JSON is larger"):
        session_data.unpack(session_data.pack(key, signer, "pull", {"v": "x" * (2 << 20)}, []), key, max_bytes=10)
    with pytest.raises(session_data.DataError, match="not a data message"):
        session_data.unpack(frames[:3], key, max_bytes=10_000)


def test_the_data_socket_cuts_a_frame_over_the_pull_limit_and_keeps_taking_replies():
    config = settings()
    saved = config.pull_max_bytes
    config.pull_max_bytes = 1 << 20
    channel = DataChannel("127.0.0.1")
    context = zmq.Context()
    big, small = context.socket(zmq.PUSH), context.socket(zmq.PUSH)
    try:
        big.connect(channel.address)
        big.send_multipart([b"<IDS|MSG>", bytes(3 << 20)])  # over pull_max_bytes + the JSON allowance
        assert channel.receive(0.5) is None and channel.dropped == 0  # libzmq cut it before it was buffered
        many = [b"x"] * (session_data.SIGNED_FRAMES + session_data.MAX_BLOBS + 1)
        small.connect(channel.address)
        small.send_multipart(many)
        assert channel.receive(2) is None and channel.dropped == 1  # too many frames: released and counted
        small.send_multipart([b"a", b"b"])
        frames = channel.receive(2)
        assert frames is not None and [f.bytes for f in frames] == [b"a", b"b"]
    finally:
        big.close(linger=0)
        small.close(linger=0)
        context.term()
        channel.close()
        config.pull_max_bytes = saved


def _npy(array, allow_pickle=False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def test_the_decoder_refuses_pickles_and_malformed_values():
    with pytest.raises(ValueDecodeError, match="pickles are never loaded"):
        read_npy(pickle.dumps([1, 2]), b"")
    obj = _npy(np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueDecodeError, match="bad .npy data"):
        read_npy(obj[:128], obj[128:])
    whole = _npy(np.arange(4))
    with pytest.raises(ValueDecodeError, match="bad .npy data"):
        read_npy(whole[:128], whole[128:-1])  # data shorter than the header says
    with pytest.raises(ValueDecodeError, match="unknown encoded value"):
        decode({session_values.TAG: "array", "blob": 3}, [])
    with pytest.raises(ValueDecodeError, match="unknown encoded value"):
        decode({session_values.TAG: "exec", "blob": 0}, [b"x"])
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

