"""A private network namespace for the workers of one local run (Linux): their TensorFlow gRPC servers, which
TensorFlow binds to ``0.0.0.0:PORT`` with no authentication, are then reachable by the run's own workers only.

One **holder** per run (this file run by ``python -I -S``, started by the kernel:
``magics/backends/isolation.py``) makes the namespace and keeps it while the run lives:

- ``unshare(CLONE_NEWNET)`` when it may (root, or any process with ``CAP_SYS_ADMIN``: the workers keep the
  user's full rights on the machine), else ``unshare(CLONE_NEWUSER | CLONE_NEWNET)`` with the user's own uid and
  gid mapped to themselves (an unprivileged user: needs unprivileged user namespaces, on by default in most
  Linux distributions);
- brings the loopback interface up (``SIOCSIFFLAGS`` on ``lo``: no external binary), so ``localhost:PORT``
  works inside and nothing else does (no other interface exists there);
- prints ``ready PID USER_INODE NET_INODE`` (or ``unavailable ERRNO TEXT``) and waits for end of file on its
  stdin, a pipe from the kernel: it goes when the run ends or the kernel dies, even by ``kill -9``.

Every worker of the run **joins** it (``join_from_env``: ``$NBWORKERS_NETNS`` = ``PID:USER_INODE:NET_INODE``)
first thing in ``bootstrap.main``, while it is still single-threaded — ``setns`` into a user namespace is refused
(``EINVAL``) to a multithreaded process, and ``import tensorflow`` or a ZMQ context start threads. A worker
forked by the zygote is single-threaded right after the fork (a fork copies only the calling thread), so the
zygote itself stays in the machine's namespace and serves every run. The inodes guard against a reused pid:
a namespace that is not the holder's is never joined. After joining a user namespace the worker drops the
capabilities that gave it there (it needs none; its rights on files are the user's, as before).

Sockets the workers use to reach the kernel are Unix sockets (``ipc://`` in the kernel's private runtime
directory), which a network namespace does not hide. Imports only the standard library (the holder runs as
``python -I -S netns.py``: no site-packages, nothing from its directory, ~50 ms).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
IFREQ = struct.Struct("16sH14x")  # struct ifreq: the name, then ifr_flags (a union of 24 bytes)
CAPS_VERSION_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set


class NamespaceUnavailable(OSError):
    """This machine (or this user) cannot make a private network namespace: the message says why."""


class NamespaceJoinError(OSError):
    """A worker could not enter its run's namespace: it must not run outside it."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _fail(cls: type[OSError], what: str) -> OSError:
    code = ctypes.get_errno()
    return cls(code, f"{what}: {os.strerror(code)} (errno {errno.errorcode.get(code, code)})")


def _inode(kind: str, pid: int | str = "self") -> int:
    return os.stat(f"/proc/{pid}/ns/{kind}").st_ino


def _write(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


def create() -> None:
    """Move this (single-threaded) process into a new network namespace with loopback up."""
    libc = _libc()
    if libc.unshare(CLONE_NEWNET) != 0:
        if ctypes.get_errno() != errno.EPERM:
            raise _fail(NamespaceUnavailable, "unshare(CLONE_NEWNET)")
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            raise _fail(NamespaceUnavailable, "unshare(CLONE_NEWUSER | CLONE_NEWNET)")
        try:
            _write("/proc/self/setgroups", "deny")  # required before an unprivileged gid_map
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as error:
            raise NamespaceUnavailable(error.errno, f"writing the user namespace's id maps: {error}") from error
    loopback_up()


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        (_, flags) = IFREQ.unpack(fcntl.ioctl(sock, SIOCGIFFLAGS, IFREQ.pack(b"lo", 0)))
        fcntl.ioctl(sock, SIOCSIFFLAGS, IFREQ.pack(b"lo", flags | IFF_UP))


def describe_self() -> str:
    """This process's namespaces as ``$NBWORKERS_NETNS`` gives them: ``PID:USER_INODE:NET_INODE``."""
    return f"{os.getpid()}:{_inode('user')}:{_inode('net')}"


def parse(value: str) -> tuple[int, int, int]:
    parts = value.split(":")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise NamespaceJoinError(errno.EINVAL, f"the run's namespace {value!r} is not PID:USER_INODE:NET_INODE")
    pid, user, net = (int(p) for p in parts)
    return pid, user, net


def join(value: str) -> bool:
    """Enter the namespaces ``value`` names (user first, then network); True when a user namespace was joined.
    Raises NamespaceJoinError when the holder is gone, its pid now names another namespace, or ``setns`` fails."""
    pid, user_inode, net_inode = parse(value)
    libc = _libc()
    joined_user = False
    for kind, flag, inode in (("user", CLONE_NEWUSER, user_inode), ("net", CLONE_NEWNET, net_inode)):
        if _inode(kind) == inode:
            continue
        try:
            fd = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as error:
            raise NamespaceJoinError(error.errno, f"the run's namespace holder {pid} is gone ({error.strerror})")
        try:
            if os.fstat(fd).st_ino != inode:
                raise NamespaceJoinError(errno.ESRCH, f"process {pid} is no longer the run's namespace holder")
            if libc.setns(fd, flag) != 0:
                raise _fail(NamespaceJoinError, f"setns({kind} namespace of {pid})")
        finally:
            os.close(fd)
        joined_user = joined_user or kind == "user"
    if joined_user:
        drop_capabilities()
    return joined_user


def drop_capabilities() -> None:
    """Clear this process's capability sets (those a user namespace's creator's process gets on ``setns``)."""
    header = struct.pack("Ii", CAPS_VERSION_3, 0)
    data = bytes(24)  # two {effective, permitted, inheritable} triples of 32 bits
    if _libc().capset(ctypes.c_char_p(header), ctypes.c_char_p(data)) != 0:
        raise _fail(NamespaceJoinError, "capset (dropping the namespace's capabilities)")


def join_from_env() -> None:
    """In a worker, first thing: enter the run's namespace when the kernel made one (``$NBWORKERS_NETNS``)."""
    from nbworkers.protocol import env_settings

    value = env_settings.NETNS.get().strip()
    if value:
        join(value)


def holder_main() -> int:
    """The holder: make the namespace, say so on stdout, keep it until stdin ends."""
    try:
        create()
    except OSError as error:
        print(f"unavailable {error.errno or 0} {error.strerror or error}", flush=True)
        return 1
    print(f"ready {describe_self().replace(':', ' ')}", flush=True)
    while os.read(0, 4096):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(holder_main())
