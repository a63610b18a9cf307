"""Isolation's pieces without a kernel: bounded receives on the kernel's sockets, ipc endpoints in the private
runtime directory, the namespace join's checks, and the ``isolation`` setting's three modes."""

from __future__ import annotations

import os
import stat
import time
import warnings

import pytest
import zmq

from nbworkers.magics.backends import isolation
from nbworkers.magics.errors import IsolationUnavailable
from nbworkers.magics.run import sockets
from nbworkers.protocol import env_settings
from nbworkers.protocol.private import netns

MiB = 2**20


@pytest.fixture
def pull():
    context = zmq.Context()
    sock = context.socket(zmq.PULL)
    address = sockets.bind(sock, sockets.IPC, None, "test")
    push = context.socket(zmq.PUSH)
    push.connect(address)
    yield address, sock, push
    push.close(linger=0)
    sock.close(linger=0)
    context.term()


def receive(sock: zmq.Socket) -> list[bytes] | sockets.TooBig:
    assert sock.poll(5000), "nothing arrived"
    return sockets.receive(sock, 6, MiB)


def test_an_ipc_endpoint_is_a_private_unix_socket(pull):
    address, _, _ = pull
    path = address[len("ipc://"):]
    assert address.startswith("ipc://") and stat.S_ISSOCK(os.stat(path).st_mode)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    parent = os.stat(os.path.dirname(path))
    assert stat.S_IMODE(parent.st_mode) == 0o700 and parent.st_uid == os.getuid()


def test_a_message_over_the_frame_or_byte_limit_is_dropped_whole_and_the_next_one_arrives(pull):
    _, sock, push = pull
    push.send_multipart([b"a"] * 40)
    push.send_multipart([b"b" * (MiB // 2)] * 3)
    push.send_multipart([b"1", b"2", b"3"])
    assert receive(sock) == sockets.TooBig(40, 40)
    assert receive(sock) == sockets.TooBig(3, 3 * (MiB // 2))
    assert receive(sock) == [b"1", b"2", b"3"]
    with pytest.raises(zmq.Again):
        sockets.receive(sock, 6, MiB)


def test_the_session_channel_counts_an_oversized_message_and_sets_its_bounds():
    from nbworkers.magics.sessions.channel import MAX_MESSAGE_BYTES, CommandChannel
    from nbworkers.magics.settings import settings

    channel = CommandChannel("00" * 32, bind_host=sockets.IPC)
    try:
        assert channel.address.startswith("ipc://")
        assert channel._socket.getsockopt(zmq.MAXMSGSIZE) == MAX_MESSAGE_BYTES
        assert channel._socket.getsockopt(zmq.RCVHWM) == settings().relay_receive_hwm
        context = zmq.Context()
        dealer = context.socket(zmq.DEALER)
        dealer.connect(channel.address)
        dealer.send_multipart([b"x" * 1000] * 40)
        for _ in range(100):
            channel.drain()
            if channel.dropped:
                break
            time.sleep(0.05)
        assert channel.dropped == 1
        dealer.close(linger=0)
        context.term()
    finally:
        channel.close()


def test_a_namespace_whose_holder_is_not_the_one_named_is_never_joined():
    with pytest.raises(netns.NamespaceJoinError, match="no longer the run's namespace holder"):
        netns.join(f"{os.getpid()}:1:2")  # this process's namespaces do not have inodes 1 and 2
    with pytest.raises(netns.NamespaceJoinError, match="not PID:USER_INODE:NET_INODE"):
        netns.join("12:ab")
    with pytest.raises(netns.NamespaceJoinError, match="gone"):
        netns.join(f"{2**22 + 7}:1:2")  # no such pid
    assert netns.join(netns.describe_self()) is False  # already there: nothing to do


def test_isolation_modes_when_the_machine_cannot_make_a_namespace(monkeypatch, caplog, capsys):
    def unavailable(timeout):
        raise isolation.HolderFailed("Operation not permitted")

    monkeypatch.setattr(isolation.RunNamespace, "start", staticmethod(unavailable))
    monkeypatch.setattr(isolation, "_warned", False)
    namespace, why = isolation.namespace_for_run("off", 1.0)
    assert namespace is None and "--isolation off" in why
    with pytest.raises(IsolationUnavailable, match="Operation not permitted.*isolation = 'auto'"):
        isolation.namespace_for_run("required", 1.0)
    with caplog.at_level("WARNING", logger="nbworkers"):
        assert isolation.namespace_for_run("auto", 1.0) == (None, "no private network namespace could be made "
                                                                   "(Operation not permitted)")
        assert isolation.namespace_for_run("auto", 1.0)[0] is None
    assert sum("not isolated" in r.getMessage() for r in caplog.records) == 1  # said once
    said = capsys.readouterr().err  # in the cell that launched the run, once, with what to do
    assert said.count("this run is not isolated") == 1 and "user.max_user_namespaces" in said


def test_a_run_records_its_isolation_and_a_restart_keeps_it_or_fails(monkeypatch, capsys):
    """The fact state.json and %workers show: off with the reason; namespace; and a restart of an isolated run
    whose namespace cannot be made again fails instead of going on un-isolated."""
    from nbworkers.magics.backends.local import LocalBackend

    class Holder:
        def __init__(self):
            self.up = True

        def alive(self):
            return self.up

        def close(self):
            self.up = False

    made = []

    def start(timeout):
        if made:
            raise isolation.HolderFailed("user namespaces now refused")
        made.append(Holder())
        return made[-1]

    monkeypatch.setattr(isolation.RunNamespace, "start", staticmethod(start))
    off = LocalBackend(isolation="off")
    assert isolation.isolation_fact(off) == {"mode": "off", "reason": "not launched yet"}
    off.plan([object()], None)
    assert isolation.isolation_fact(off)["mode"] == "off"
    assert "--isolation off" in isolation.isolation_text(isolation.isolation_fact(off))

    backend = LocalBackend(isolation="auto")
    backend.plan([object()], None)
    assert isolation.isolation_fact(backend) == {"mode": "namespace"}
    assert isolation.isolation_text(isolation.isolation_fact(backend)) == "namespace"
    made[0].up = False  # its holder was killed: the restart's plan needs a new one, and cannot have it
    with pytest.raises(IsolationUnavailable, match="user namespaces now refused"):
        backend.plan([object()], None)
    assert isolation.isolation_text(None) == "?"  # a state.json of an older nbworkers
    # a backend that makes no namespace says so through the protocol (Backend.isolation_fact)
    assert isolation.no_namespace("fake") == {"mode": "off", "reason": "the fake backend makes no private network namespace"}


def test_the_isolation_variable_takes_three_words():
    assert env_settings.ISOLATION.get({"NBWORKERS_ISOLATION": "Required"}) == "required"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert env_settings.ISOLATION.get({"NBWORKERS_ISOLATION": "yes"}) == "auto"
    assert "auto, required or off" in str(caught[0].message)


def test_the_isolation_flag_reaches_the_local_backend_and_is_refused_for_ray():
    from argparse import Namespace

    from nbworkers.magics.errors import LaunchError
    from nbworkers.magics.backends.local import LocalOptions
    from nbworkers.magics.launch.spec import LaunchSpec
    from nbworkers.magics.notebook.parse import check_backend
    from nbworkers.magics.run.group_launch import backend_for

    backend = backend_for(LaunchSpec(code="x = 1", options=LocalOptions(isolation="off")))
    assert backend.isolation == "off"
    backend.plan([object(), object()], None)  # off: no namespace made, whatever the setting says
    assert backend.isolated is False
    with pytest.raises(LaunchError, match="--isolation: only for the local backend"):
        check_backend(Namespace(backend="ray", isolation="off", address="", cpus_per_worker=None, spread=False))
