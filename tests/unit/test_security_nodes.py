"""Trust on every node, the parts that need no process (issue 32): the runtime directory's parents, the zygote's
peer credentials, a Ray node's working directory and log files, and CURVE keys bound to worker indices.

Real directories with bad modes and owners (``nobody`` through ``chown``, as root), real FIFOs and symlinks, real
Unix and ZeroMQ sockets. What needs another user's process (a fake zygote run as ``nobody``) is in
tests/integration/test_security_nodes_processes.py.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time

import pytest

from nbworkers.protocol import wire
from nbworkers.protocol.private import dirs as private_dirs
from nbworkers.protocol.private.dirs import UnsafeDirectory, UnsafeRuntimeBase, check_importable, runtime_dir
from nbworkers.protocol.private.files import UnsafeFile, open_own

OTHER_UID = 65534  # nobody
as_root = pytest.mark.skipif(os.getuid() != 0, reason="a folder owned by another user needs root to make")


@pytest.fixture
def no_runtime_env(monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv(private_dirs.RUNTIME_DIR_ENV, raising=False)
    monkeypatch.setattr(private_dirs, "_fallbacks", {})


# ---------------------------------------------------------------------------------- 1. the runtime directory
def test_nothing_private_is_made_under_a_tmpdir_others_may_write_without_the_sticky_bit(tmp_path, no_runtime_env,
                                                                                     monkeypatch):
    scratch = tmp_path / "scratch"  # as on HPC scratch: group- and world-writable, no sticky bit
    scratch.mkdir()
    scratch.chmod(0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with pytest.raises(UnsafeRuntimeBase, match="no sticky bit") as refused:
        runtime_dir("nbworkers-zygote")
    assert private_dirs.RUNTIME_DIR_ENV in str(refused.value) and "mkdir -m 700" in str(refused.value)
    assert list(scratch.iterdir()) == []  # not even the mkdtemp fall-back
    below = scratch / "deeper"  # a safe-looking folder inside it can still be renamed away
    below.mkdir(mode=0o755)
    with pytest.raises(UnsafeRuntimeBase):
        runtime_dir("nbworkers-zygote", base=below)
    scratch.chmod(0o1777)  # sticky, as /tmp: only an entry's owner may rename it
    made = runtime_dir("nbworkers-zygote")
    assert made.parent == scratch and os.lstat(made).st_mode & 0o777 == 0o700


def test_nbworkers_runtime_dir_is_where_the_private_directories_go(tmp_path, no_runtime_env, monkeypatch):
    chosen = tmp_path / "mine" / "run"
    monkeypatch.setenv(private_dirs.RUNTIME_DIR_ENV, str(chosen))
    made = runtime_dir("nbworkers-ipc")
    assert made == chosen / f"nbworkers-ipc-{os.getuid()}" and os.lstat(chosen).st_mode & 0o777 == 0o700
    chosen.chmod(0o777)
    with pytest.raises(UnsafeDirectory, match="open to other users"):
        runtime_dir("nbworkers-ipc")


@as_root
def test_a_tmpdir_inside_another_users_folder_is_refused(tmp_path, no_runtime_env):
    theirs = tmp_path / "theirs"
    (theirs / "tmp").mkdir(parents=True, mode=0o755)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeRuntimeBase, match="belongs to user id 65534"):
        runtime_dir("nbworkers-zygote", base=theirs / "tmp")
    assert list((theirs / "tmp").iterdir()) == []


# ---------------------------------------------------------------------------------- 1. the zygote's peer
def test_the_host_sends_nothing_to_a_process_that_is_not_the_zygote_it_was_told(tmp_path):
    from nbworkers.host.zygote_client import check_peer, fork_worker, peer_credentials

    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert peer_credentials(ours)[:2] == (os.getpid(), os.getuid())
        check_peer(ours, os.getpid())  # this user, the expected process: fine

    path = tmp_path / "zygote.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    received = []

    def serve():
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            received.append(conn.recv(65536))  # b"": closed, nothing sent

    server = threading.Thread(target=serve)
    server.start()
    log = (tmp_path / "worker.log").open("wb")
    try:
        worker = fork_worker(str(path), 5.0, log, connect_timeout=5.0, expected_pid=os.getpid() + 100000)
    finally:
        log.close()
        server.join(10)
        listener.close()
    assert worker is None and received == [b""]
    note = (tmp_path / "worker.log").read_text()
    assert f"is pid {os.getpid()}, not the zygote {os.getpid() + 100000}" in note and "spawning this worker" in note


# ---------------------------------------------------------------------------------- 2. a Ray node's cwd and logs
def test_a_working_directory_others_can_write_or_own_is_not_imported_from(tmp_path):
    from nbworkers.magics.backends.ray.nodes.host_actor import usable_cwd

    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    good = tmp_path / "project"
    good.mkdir(mode=0o755)
    assert check_importable(good) == good
    assert usable_cwd(str(good), run_dir) == (str(good), "", False)
    for mode, why in ((0o777, "may be written by other users"), (0o1777, "may be written by other users"),
                      (0o775, "may be written by other users")):
        good.chmod(mode)
        cwd, note, unsafe = usable_cwd(str(good), run_dir)
        assert (cwd, unsafe) == (str(run_dir), True) and why in note and "chmod go-w" in note
        assert f"runs in the private directory {run_dir}" in note
    good.chmod(0o755)
    open_parent = tmp_path / "shared"
    (open_parent / "project").mkdir(parents=True, mode=0o755)
    open_parent.chmod(0o777)  # the folder itself is fine, but another user can swap it through its parent
    assert usable_cwd(str(open_parent / "project"), run_dir)[2] is True
    missing = usable_cwd(str(tmp_path / "nowhere"), run_dir)
    assert missing[0] == str(run_dir) and "does not exist" in missing[1] and missing[2] is False


@as_root
def test_a_working_directory_another_user_made_on_the_node_is_not_imported_from(tmp_path):
    from nbworkers.magics.backends.ray.nodes.host_actor import usable_cwd

    planted = tmp_path / "home" / "me" / "notebooks"  # made on node B by someone else, mode 0755
    planted.mkdir(parents=True, mode=0o755)
    os.chown(planted, OTHER_UID, OTHER_UID)
    cwd, note, unsafe = usable_cwd(str(planted), tmp_path)
    assert unsafe and cwd == str(tmp_path) and "belongs to user id 65534" in note
    link = tmp_path / "link"  # reached through a symlink: the real folder is what is checked
    link.symlink_to(planted)
    assert "belongs to user id 65534" in usable_cwd(str(link), tmp_path)[1]


def test_a_fifo_or_a_symlink_at_a_log_path_is_refused_at_once(tmp_path):
    from nbworkers.magics.backends.ray.nodes.host_actor import log_probe

    fifo = tmp_path / "worker-0.log"
    os.mkfifo(fifo)  # a plain open() for reading would wait for a writer forever
    started = time.monotonic()
    with pytest.raises(UnsafeFile, match="not a regular file"):
        open_own(fifo, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with pytest.raises(UnsafeFile, match="not a regular file"):
        open_own(fifo)
    assert log_probe(fifo) == (-1, b"")
    assert time.monotonic() - started < 5
    target = tmp_path / "elsewhere"
    target.write_text("secret")
    link = tmp_path / "worker-1.log"
    link.symlink_to(target)
    with pytest.raises(UnsafeFile, match="symlink"):
        open_own(link, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    assert target.read_text() == "secret"
    regular = tmp_path / "worker-2.log"
    fd = open_own(regular, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        assert os.get_blocking(fd)  # O_NONBLOCK only for the open: the worker's stderr blocks as usual
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------- 3. Ray channels
def test_one_nodes_key_cannot_speak_for_another_worker():
    """Two authorised nodes: node A's key sending as worker 1 is dropped on the relay, and A's `ready` as worker 1
    never makes the command channel route worker 1's cells to A."""
    from nbworkers.magics.run.relay import RelayReceiver
    from nbworkers.magics.sessions.channel import CommandChannel
    from nbworkers.protocol.relay_curve import client_keypair

    key = wire.new_key()
    relay = RelayReceiver(key, "127.0.0.1", curve=True)
    node_a, node_b = client_keypair(), client_keypair()
    relay.allow_client(node_a[0], 0)
    relay.allow_client(node_b[0], 1)
    senders = [wire.Sender(relay.address, key, index, curve=(relay.server_public_key, *keys))
               for index, keys in ((0, node_a), (1, node_a), (1, node_b))]  # A as itself, A as B, B as itself
    try:
        for sender in senders:
            sender.send("log", lines=[f"from key {sender is senders[2] and 'B' or 'A'} as {sender.worker}\n"])
        received = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(received) < 2:
            received += relay.poll(0.1)
        received += relay.poll(0.5)
        assert sorted(m.content["lines"][0] for m in received) == ["from key A as 0\n", "from key B as 1\n"]
        assert relay.drops.bad_signature == 1 and "not the worker it was made for" in relay.drops.reasons[-1]
    finally:
        for sender in senders:
            sender.close(0)
        relay.close()

    relay = RelayReceiver(key, "127.0.0.1", curve=True)
    relay.allow_client(node_a[0], 0)
    relay.allow_client(node_b[0], 1)
    channel = CommandChannel(key, "127.0.0.1", curve=relay.curve)
    import zmq

    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.curve_serverkey, dealer.curve_publickey, dealer.curve_secretkey = (
        relay.server_public_key.encode(), node_a[0].encode(), node_a[1].encode())
    dealer.connect(channel.address)
    try:
        signer = wire.Signer(key)
        dealer.send_multipart(signer.frames("ready", {"worker": 1, "gen": 0}))  # A claims to be worker 1
        dealer.send_multipart(signer.frames("ready", {"worker": 0, "gen": 0}))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not channel.ready_workers():
            channel.drain()
            time.sleep(0.05)
        channel.drain()
        assert channel.ready_workers() == {0} and channel.dropped == 1
        assert channel.send("cell", workers=[1], code="secret = 1") == []  # worker 1's cell goes nowhere
    finally:
        dealer.close(0)
        context.term()
        channel.close()
        relay.close()


def test_one_nodes_key_cannot_answer_a_pull_for_another_worker():
    """A session's data socket is tied to worker indices too: node A's key sending a signed reply for worker 1's
    pull is dropped before it is unpacked (counted as forged); worker 1's own reply is taken."""
    from types import SimpleNamespace

    import zmq

    from nbworkers.magics.run.relay import RelayReceiver
    from nbworkers.magics.sessions.data import DataChannel
    from nbworkers.magics.sessions.pull import PullError, PullRequest, _receive
    from nbworkers.protocol import session_data, session_values
    from nbworkers.protocol.relay_curve import client_keypair

    key = wire.new_key()
    relay = RelayReceiver(key, "127.0.0.1", curve=True)
    node_a, node_b = client_keypair(), client_keypair()
    relay.allow_client(node_a[0], 0)
    relay.allow_client(node_b[0], 1)
    data = DataChannel("127.0.0.1", curve=relay.curve)
    session = SimpleNamespace(unpack_reply=lambda frames, _open: session_data.unpack(frames, key, 1 << 20))
    request = PullRequest("r1", 1, 0)
    context = zmq.Context()
    pushes = {}
    for name, keys in (("A", node_a), ("B", node_b)):
        push = pushes[name] = context.socket(zmq.PUSH)
        push.curve_serverkey, push.curve_publickey, push.curve_secretkey = (
            relay.server_public_key.encode(), keys[0].encode(), keys[1].encode())
        push.connect(data.address)

    def reply(value: str) -> list:
        tree, blobs = session_values.encode(value)
        content = {"request": "r1", "worker": 1, "gen": 0, "value": tree}
        return session_data.pack(key, wire.Signer(key), "pull", content, blobs)

    try:
        pushes["A"].send_multipart(reply("forged by node A"))  # signed with the run's key, but A's CURVE key
        with pytest.raises(PullError, match="no reply from worker 1"):
            _receive(session, data, request, 3)
        assert data.forged == 1 and data.dropped == 1
        pushes["B"].send_multipart(reply("from worker 1"))
        assert _receive(session, data, request, 5) == "from worker 1"
        assert data.forged == 1
    finally:
        for push in pushes.values():
            push.close(0)
        context.term()
        data.close()
        relay.close()


def test_the_channels_bind_the_address_the_nodes_use_and_bound_the_handshake():
    import zmq

    from nbworkers.magics.backends.ray.address import bind_host
    from nbworkers.magics.run import sockets

    assert bind_host("127.0.0.1") == "127.0.0.1" and bind_host("localhost") == "127.0.0.1"
    assert bind_host("192.0.2.1") == "0.0.0.0"  # not this machine's (behind NAT): every interface, as before
    context = zmq.Context()
    pull = context.socket(zmq.PULL)
    try:
        address = sockets.bind(pull, "127.0.0.1", "127.0.0.1", "relay")
        assert address.startswith("tcp://127.0.0.1:")
        assert pull.getsockopt(zmq.LAST_ENDPOINT).decode().startswith("tcp://127.0.0.1:")
        assert pull.getsockopt(zmq.HANDSHAKE_IVL) == sockets.HANDSHAKE_SECONDS * 1000 < 30000
        assert pull.getsockopt(zmq.BACKLOG) == sockets.PENDING_CONNECTIONS < 100
    finally:
        pull.close(0)
        context.term()


def test_a_ray_workers_host_is_told_its_node_zygotes_pid():
    """The node zygote's pid, from its actor's answer, goes with the socket to the worker's host (``--zygote-pid``),
    which checks that the process at the socket is that one (as locally)."""
    from nbworkers.magics.backends.ray.node_zygotes import Asked, NodeZygotes

    class FakeRay:
        @staticmethod
        def get(ref, timeout=None):
            return ref

    zygotes = NodeZygotes()
    asked = Asked(key="k", python="", forwarded={}, refs={
        "node-a": (object(), {"socket": "/run/a.sock", "pid": 4242, "log": "/run/a.log"}),
        "node-b": (object(), {"socket": "/run/b.sock", "pid": 4343, "log": "/run/b.log"})})
    answers = zygotes.answers(FakeRay(), asked, ["node-a", "node-b", "node-a"], timeout=1.0)
    assert answers == [("/run/a.sock", ""), ("/run/b.sock", ""), ("/run/a.sock", "")]
    assert (zygotes.pid_at("/run/a.sock"), zygotes.pid_at("/run/b.sock"), zygotes.pid_at(None)) == (4242, 4343, None)
