"""Hardening: each attack and bad input of the security review, tried for real (every test fails on the code before).

An attacker on the same machine (another user's directories in /tmp, a replayed or unencrypted relay message) and
a compromised worker (hostile relay messages, endless lines) are played by this test process, with no other process:
the attacks that need real processes (the relay's memory under a flood, signals, a real run) are in
tests/integration/test_security_processes.py.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest
import zmq

from nbworkers.protocol import wire
from nbworkers.protocol.private.dirs import UnsafeDirectory, private_dir, runtime_dir

OTHER_UID = 65534  # nobody
HOST_MODULE = "nbworkers.host.worker_host"
MiB = 2**20


def plant_argparse(directory: Path) -> Path:
    """A planted ``argparse.py``: if any nbworkers process imports it, it leaves a marker file behind."""
    marker = directory / "PWNED"
    (directory / "argparse.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\nraise SystemExit(99)\n")
    return marker


# ---------------------------------------------------------------------------------------------- 1. private dirs
@pytest.mark.skipif(os.getuid() != 0, reason="planting a directory owned by another user needs root")
def test_a_directory_owned_by_another_user_is_refused_and_a_fresh_one_used(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    planted = tmp_path / f"nbworkers-zygote-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeDirectory, match="belongs to user id 65534"):
        private_dir(planted)
    chosen = runtime_dir("nbworkers-zygote", base=tmp_path)
    assert chosen != planted and chosen.parent == tmp_path
    info = os.lstat(chosen)
    assert info.st_uid == os.getuid() and (info.st_mode & 0o777) == 0o700


def test_a_symlink_or_an_open_directory_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / f"nbworkers-ray-{os.getuid()}"
    link.symlink_to(target)
    with pytest.raises(UnsafeDirectory, match="symlink"):
        private_dir(link)
    assert runtime_dir("nbworkers-ray", base=tmp_path) not in (link, target)
    open_dir = tmp_path / f"nbworkers-open-{os.getuid()}"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(UnsafeDirectory, match="open to other users"):
        private_dir(open_dir)
    fresh = private_dir(tmp_path / "fresh")
    assert os.lstat(fresh).st_mode & 0o777 == 0o700


def test_the_zygote_directory_planted_by_another_user_is_not_where_zygotes_start(tmp_path, monkeypatch):
    from nbworkers.magics.backends import zygotes

    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    planted = tmp_path / f"{zygotes.ZYGOTE_DIR_NAME}-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)  # as another user would leave it for us (or owned by them: see the root-only test)
    plant_argparse(planted)
    where = Path(runtime_dir(zygotes.ZYGOTE_DIR_NAME))  # the zygote's cwd, socket and log (zygotes.py)
    assert where != planted and not (where / "argparse.py").exists()
    assert os.lstat(where).st_uid == os.getuid() and os.lstat(where).st_mode & 0o777 == 0o700


def test_the_ray_node_run_dir_is_private_and_never_a_planted_symlink(tmp_path, monkeypatch):
    from nbworkers.magics.backends.ray.nodes import host_actor

    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    target = tmp_path / "attacker"
    target.mkdir()
    (tmp_path / f"nbworkers-ray-{os.getuid()}").symlink_to(target)
    run_dir = host_actor.node_run_dir("myrun-host-1")
    assert not run_dir.resolve().is_relative_to(target.resolve())
    assert os.lstat(run_dir).st_mode & 0o777 == 0o700 and os.lstat(run_dir.parent).st_mode & 0o777 == 0o700


def push_socket(address: str) -> tuple[zmq.Context, zmq.Socket]:
    context = zmq.Context()
    socket = context.socket(zmq.PUSH)
    socket.setsockopt(zmq.LINGER, 20000)
    socket.connect(address)
    return context, socket


# ---------------------------------------------------------------------------------------------- 2. relay memory
def test_a_replayed_message_is_dropped_and_the_replay_history_is_bounded():
    from nbworkers.magics.run.relay import RelayReceiver

    key = wire.new_key()
    relay = RelayReceiver(key, replay_history=50)
    context, socket = push_socket(relay.address)
    signer = wire.Signer(key)
    try:
        first = signer.frames("log", {"worker": 0, "gen": 0, "t": 0.0, "lines": ["a\n"]})
        socket.send_multipart(first)
        socket.send_multipart(first)  # a replay
        for i in range(200):
            socket.send_multipart(signer.frames("log", {"worker": 0, "gen": 0, "t": 0.0, "lines": [f"{i}\n"]}))
        received = []
        deadline = time.monotonic() + 30
        while len(received) + relay.drops.total < 202 and time.monotonic() < deadline:
            received += relay.poll(0.05)
        assert len(received) == 201 and relay.drops.bad_signature == 1, relay.drops.reasons
        assert "Duplicate" in relay.drops.reasons[-1]
        assert len(relay._session.digest_history) <= 50
    finally:
        socket.close(0)
        context.term()
        relay.close()


# ---------------------------------------------------------------------------------------------- 4. kill only ours
def test_a_hello_with_pid_0_or_1_is_dropped():
    for pid in (0, 1, -1, True):
        assert wire.validate("hello", {"worker": 0, "gen": 0, "pid": pid}) is not None
    assert wire.validate("hello", {"worker": 0, "gen": 0, "pid": 4242}) is None


# Run directories and their files are private (0700 / 0600, whatever the umask): tests/unit/test_rundir.py,
# test_a_new_run_dir_is_private_and_holds_cell_push_and_empty_logs.


# ---------------------------------------------------------------------------------------------- 5. run dirs
def test_fresh_names_skip_every_run_directory_under_the_run_root(tmp_path):
    from nbworkers.magics.launch.bounds import existing_run_names
    from nbworkers.magics.launch.names import ADJECTIVES, ANIMALS, fresh_name
    from nbworkers.magics.settings import settings

    config = settings()
    old = config.run_root
    config.run_root = str(tmp_path)
    try:
        for adjective in ADJECTIVES:
            for animal in ANIMALS:
                (tmp_path / f"{adjective}-{animal}").mkdir()
        name = fresh_name(set() | existing_run_names())
        assert not (tmp_path / name).exists() and name.endswith("-2")
    finally:
        config.run_root = old


# ---------------------------------------------------------------------------------------------- 7. endless lines
def test_an_endless_line_is_cut_in_the_kernel_and_in_the_host():
    from nbworkers.host.worker_host import LineCap
    from nbworkers.magics.run.core.logtail import LogTail

    tail = LogTail(10, max_line_chars=1000)
    chunk = "x" * 65536
    for _ in range(800):  # 50 MiB without a newline, as the relay would bring it
        tail.feed([chunk])
    tail.feed(["\nnext line\n"])
    lines = tail.lines()
    assert len(lines[0]) < 1200 and lines[0].startswith("x" * 1000) and "cut by nbworkers" in lines[0]
    assert lines[1] == "next line"
    cap = LineCap(1000)
    sent = sum(len(cap(chunk)) for _ in range(800))
    assert sent < 1200 and cap("\nok\n") == "\nok\n"


# ---------------------------------------------------------------------------------------------- 8. bad flags
@pytest.mark.parametrize("flags, message", [
    ({"workers": 100_000}, "max_workers"),
    ({"timeout": float("nan")}, "--timeout nan"),
    ({"timeout": float("inf")}, "--timeout inf"),
    ({"stall_timeout": float("nan")}, "--stall-timeout nan"),
    ({"stall_timeout": -1.0}, "--stall-timeout -1"),
])
def test_unbounded_or_non_finite_flags_are_refused(flags, message):
    from argparse import Namespace

    from nbworkers.magics.errors import LaunchError
    from nbworkers.magics.launch.bounds import check_bounds

    args = Namespace(**{"workers": 2, "timeout": None, "stall_timeout": None, "ps": None, "chief": False,
                        "evaluator": 0, **flags})
    with pytest.raises(LaunchError, match=message.replace("+", r"\+")):
        check_bounds(args)


# ---------------------------------------------------------------------------------------------- 6. across machines
def test_the_ray_relay_is_encrypted_and_only_the_nodes_keys_may_connect():
    from nbworkers.magics.run.relay import RelayReceiver
    from nbworkers.protocol.relay_curve import client_keypair

    key = wire.new_key()
    relay = RelayReceiver(key, curve=True)
    node_public, node_secret = client_keypair()  # made on the node; only the public half reaches the kernel
    relay.allow_client(node_public)
    stranger = client_keypair()
    senders = {
        "node": wire.Sender(relay.address, key, 0, curve=(relay.server_public_key, node_public, node_secret)),
        "plain": wire.Sender(relay.address, key, 0),  # has the HMAC key (it crossed in Ray's traffic), no curve
        "stranger": wire.Sender(relay.address, key, 0, curve=(relay.server_public_key, *stranger)),
    }
    try:
        assert relay._socket.curve_server
        for name, sender in senders.items():
            sender.send("log", lines=[f"from {name}\n"])
        received = []
        deadline = time.monotonic() + 5  # what arrives, arrives at once; give the others the same chance
        while time.monotonic() < deadline:
            received += relay.poll(0.1)
        assert [m.content["lines"] for m in received] == [["from node\n"]]
        assert relay.curve.keys.refused >= 1  # the stranger's handshake was refused
    finally:
        for sender in senders.values():
            sender.close(0)
        relay.close()
    env = {wire.ENV_RELAY: "tcp://127.0.0.1:9", wire.ENV_KEY: key, wire.ENV_RELAY_SERVERKEY: relay.server_public_key,
           wire.ENV_RELAY_CLIENTKEY: node_public, wire.ENV_RELAY_CLIENTSECRET: node_secret}
    sender = wire.Sender.from_env(env)
    assert sender._socket.mechanism == zmq.CURVE
    sender.close(0)


@pytest.mark.parametrize("wanted, same", [
    ("127.0.0.1:{port}", True), ("localhost:{port}", True), ("{ip}:{port}", True), ("auto", True), ("", True),
    ("ray://127.0.0.1:10001", True), ("127.0.0.1:{other}", False), ("192.0.2.1:{port}", False),
    ("ray://192.0.2.1:10001", False),
])
def test_any_spelling_of_the_connected_ray_head_is_the_same_cluster(wanted, same):
    import socket

    from nbworkers.magics.backends.ray.address import _local_ips, same_cluster

    ip = next((a for a in sorted(_local_ips()) if "." in a and not a.startswith("127.")), socket.gethostname())
    current = f"{ip}:6379"  # as Ray reports the connected head: this machine's LAN address
    assert same_cluster(wanted.format(ip=ip, port=6379, other=6380), current) is same
