"""A local session's push when its shared-memory file cannot be written (magics/sessions/channel.py): another user
filling ``/dev/shm`` (ENOSPC) or any other ``OSError`` sends the push as frames instead, the values arrive whole,
no file is left, every later push of the session goes as frames too, and the cell is told once, not per push.
The kernel's real command socket and a worker's DEALER; a fake ``ShmFiles`` whose write fails. A real ``/dev/shm``
filled by another user, in a real session: tests/integration/test_sessions_shm_full.py."""

from __future__ import annotations

import errno
import time
import types
from pathlib import Path

import numpy as np
import pytest
import zmq

from nbworkers.magics.notebook.remote.detached_session import DetachedSession
from nbworkers.magics.sessions.channel import CommandChannel
from nbworkers.magics.sessions.detach.handlers import handle
from nbworkers.magics.sessions.push import _encode
from nbworkers.magics.run import sockets
from nbworkers.protocol import session_data, session_shm, session_values, wire

MIB = 2**20
READY_WAIT = 10.0  # seconds for the worker's `ready` to reach the channel


class Peer:
    """The kernel's command channel (a Unix socket, as for a local session) and worker 0's DEALER."""

    def __init__(self) -> None:
        self.key = wire.new_key()
        self.channel = CommandChannel(self.key, bind_host=sockets.IPC)
        self.context = zmq.Context()
        self.worker = self.context.socket(zmq.DEALER)
        self.worker.setsockopt(zmq.LINGER, 0)
        self.worker.connect(self.channel.address)
        self.worker.send_multipart(wire.Signer(self.key).frames("ready", {"worker": 0, "gen": 0}))
        deadline = time.monotonic() + READY_WAIT
        while self.channel.ready_workers() != {0} and time.monotonic() < deadline:
            self.channel.drain()
            time.sleep(0.02)
        assert self.channel.ready_workers() == {0}

    def push(self, **values) -> bool:
        tree, blobs = _encode(values, False, 1 << 30)
        return self.channel.send_data("push", 0, {"values": tree}, blobs, 30.0, shm_min_bytes=MIB)

    def received(self) -> tuple[dict, dict]:
        """What worker 0 got: the content's fields and the decoded values (frames only: no shared memory opened)."""
        assert self.worker.poll(10_000), "nothing reached the worker"
        _, content, blobs = session_data.unpack(self.worker.recv_multipart(copy=False), self.key, 1 << 30)
        return content, session_values.decode(content["values"], blobs)

    def close(self) -> None:
        self.worker.close()
        self.context.term()
        self.channel.close()


class FailingFiles(session_shm.ShmFiles):
    """A folder whose files cannot be written (``error``), counting the tries."""

    def __init__(self, folder: Path, error: OSError):
        super().__init__(folder)
        self.error, self.tries = error, 0

    def write(self, path, blobs):
        self.tries += 1
        raise self.error


@pytest.fixture
def peer():
    made = Peer()
    yield made
    made.close()


def test_a_push_whose_file_cannot_be_written_goes_as_frames_said_once(peer, tmp_path, capsys):
    folder = tmp_path / "shm"
    folder.mkdir(mode=0o700)
    files = peer.channel.shm = FailingFiles(folder, PermissionError(errno.EACCES, "Permission denied"))
    big = np.arange(MIB // 2, dtype=np.float64)  # 4 MiB
    assert peer.push(big=big)
    content, values = peer.received()
    assert "shm_path" not in content and np.array_equal(values["big"], big)
    assert peer.push(again=big + 1) and np.array_equal(peer.received()[1]["again"], big + 1)
    assert files.tries == 1  # the second push did not try the folder again
    said = capsys.readouterr().err
    assert said.count("nbworkers: a push through shared memory failed") == 1 and "Permission denied" in said
    assert f"`df -h {folder}`" in said and peer.channel.shm_failed == "Permission denied"
    assert peer.push(small=np.arange(3)) and peer.received()[1]["small"].tolist() == [0, 1, 2]  # small: frames


def test_a_push_that_fits_still_goes_through_shared_memory(peer, tmp_path):
    folder = tmp_path / "shm"
    folder.mkdir(mode=0o700)
    peer.channel.shm = session_shm.ShmFiles(folder)
    assert peer.push(big=np.ones(MIB, dtype=np.float32))
    assert peer.worker.poll(10_000)
    _, content, _ = session_data.unpack(peer.worker.recv_multipart(), peer.key, 1 << 30,
                                        open_shm=session_shm.open_named)
    assert content["shm_path"].startswith(str(folder)) and not peer.channel.shm_failed


class FallingBackSession:
    """A detached session's ``Session`` as the supervisor's handlers see it: its first push falls back."""

    def __init__(self) -> None:
        self.channel = types.SimpleNamespace(shm_failed="", shm_note="")

    def push(self, workers=None, allow_pickle=False, **values):
        self.channel.shm_failed, self.channel.shm_note = "No space left on device", "nbworkers: a push through ..."
        return [0]


def test_a_detached_sessions_fallback_is_said_in_the_kernels_cell_once(capsys):
    """The supervisor's answer carries the note the first time (its own stderr is its log, not the cell); the
    kernel's handle prints it."""
    session = FallingBackSession()
    tree, frames = session_values.encode({"a": np.ones(3)})
    first, _ = handle(session, "push", {"values": tree, "workers": None}, frames)
    second, _ = handle(session, "push", {"values": tree, "workers": None}, frames)
    assert first == {"ok": True, "workers": [0], "note": "nbworkers: a push through ..."}
    assert second == {"ok": True, "workers": [0]}
    remote = DetachedSession.__new__(DetachedSession)
    answers = iter([(first, []), (second, [])])
    remote.client = types.SimpleNamespace(request=lambda *args, **kwargs: next(answers))
    assert remote.push(a=np.ones(3)) == [0] and remote.push(a=np.ones(3)) == [0]
    assert capsys.readouterr().err.count("nbworkers: a push through ...") == 1
