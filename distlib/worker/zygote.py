"""The zygote (fork server): ``python -m nbworkers.distlib.worker.zygote --socket PATH``.

One per (interpreter, import-time environment) of a kernel (``nbworkers.magics.backends.zygotes``). It binds
its Unix socket (in a private 0700 directory) first, then imports its framework (TensorFlow and Keras; JAX and
Keras on JAX for ``--framework jax``) and nbworkers' worker-side modules once (``distlib/frameworks``), and then
only forks: one thread, one ``select`` loop, no op run, no device listed, no thread pool, no CUDA — forking after
TensorFlow's runtime started hangs the child (tensorflow/tensorflow#2448, #8220), and JAX warns of the same after
its backends started. ``fork_refusal()`` is the guard checked before every fork.

Protocol, one connection per worker, from its host process (``backends.zygote_client``): the host sends an
8-byte length with one fd attached (SCM_RIGHTS: the write end of the pipe the host reads the worker's output
from), then that many bytes of JSON ``{"env": {...}, "cwd": "..."}``. The zygote answers ``pid N`` (or
``refused REASON``) and, when the child has exited, ``exit CODE`` (negative: killed by that signal).
The child: ``setsid`` (its own session and process group, as a spawned worker), stdout and stderr onto the
host's pipe, stdin from ``/dev/null``, the run's whole environment (``TF_CONFIG``, ``--env``,
``CUDA_VISIBLE_DEVICES``, relay, cell), the cell's directory, then ``bootstrap.main`` (a cell or a session).

``CUDA_VISIBLE_DEVICES`` per child is safe without a zygote per GPU set: the CUDA driver reads it in
``cuInit``, and TensorFlow calls ``cuInit`` lazily, when its runtime first lists devices (the first op, the
eager context's initialisation, ``list_physical_devices``) — never at ``import tensorflow`` (seen here: the
"failed call to cuInit" line appears at the first op, not at the import). The zygote never gets that far
(the guard refuses to fork once the eager context exists), so each child's driver initialises after the
child set its own value. Variables read *at import* (``TF_USE_LEGACY_KERAS``, ``KERAS_*``, ``TF_*``, library
paths) select another zygote instead (the key, see ``zygotes``).

Supervision stays with the host: it holds the output pipe, signals the child's group, and gets its exit code
from here. A host that dies (its connection closes) has its child's group killed here; the kernel's death
(end of file on this process's stdin, a pipe from the kernel) makes it fork no more and exit once its
children have ended (their hosts stop them on the same end of file). With ``--idle-timeout S`` it also exits
(code 0) after S seconds with no running child and no fork: the kernel then starts a new one for its next run.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time
import traceback

from nbworkers.distlib import frameworks
from nbworkers.protocol import env_settings

FORKED_ENV = env_settings.FORKED.name  # set in a forked worker: the pid of the zygote it came from
HEADER = struct.Struct("!Q")
MAX_REQUEST_BYTES = 64 * 2**20
LOOP_INTERVAL = 0.2  # seconds between reaps of exited children

_baseline_tasks: int | None = None  # OS threads right after the imports (TensorFlow's import leaves one idle)
_guard_broken = ""  # set when the private symbols the guard reads are gone (check_internals)


def os_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def check_internals() -> None:
    """The guard reads private symbols of the framework (TensorFlow's eager context, JAX's backends): when they are
    gone it cannot tell whether the runtime started, so every fork is refused (the hosts spawn instead)."""
    global _guard_broken
    _guard_broken = frameworks.current().guard_broken()


def fork_refusal() -> str | None:
    """None when forking is safe, else why not: the framework's runtime started (TensorFlow's eager context, a JAX
    backend: their thread pools and perhaps CUDA), or more threads run than right after the imports."""
    if _guard_broken:
        return _guard_broken
    if threading.active_count() != 1:
        return f"{threading.active_count()} Python threads are running (a fork copies only one)"
    refusal = frameworks.current().fork_refusal()
    if refusal:
        return refusal
    if _baseline_tasks is not None and os_threads() > _baseline_tasks:
        return f"{os_threads()} OS threads run, {_baseline_tasks} after the imports: a runtime started"
    return None


def preload() -> None:
    """The framework's modules (``NBWORKERS_FRAMEWORK``: TensorFlow's, or JAX and Keras on JAX, and TensorFlow when
    installed), after the socket is bound (``main``): hosts may connect and wait meanwhile."""
    for name in frameworks.current().preload():
        try:
            importlib.import_module(name)
        except Exception as error:
            print(f"nbworkers zygote: could not preload {name}: {error!r}", flush=True)


def freeze_imports() -> None:
    """After the imports (~670,000 objects for JAX, Keras and TensorFlow), gc.disable()d during them: they build
    no garbage worth the ~1,000 collections (~1 s of CPU, seven full ones) that walked them in a plain import (seen:
    ~4,000 unreachable objects, 2 MB, no file left open). ``gc.freeze`` puts them in the permanent generation, so
    no forked worker's collection walks them (nor writes to their pages: copy-on-write) - the recipe of ``gc.freeze``'s
    documentation for processes that fork without exec - and collections resume for what comes next."""
    gc.freeze()
    gc.enable()


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError("the host closed the connection")
        data += chunk
    return bytes(data)


def read_request(conn: socket.socket) -> tuple[dict, int]:
    """The host's request and the output fd it passed."""
    conn.settimeout(env_settings.ZYGOTE_REQUEST_TIMEOUT.get())
    first, fds, _, _ = socket.recv_fds(conn, HEADER.size, 1)
    try:
        if len(fds) != 1 or not first:
            raise ValueError("no output fd passed")
        header = first + _recv_exact(conn, HEADER.size - len(first))
        (size,) = HEADER.unpack(header)
        if size > MAX_REQUEST_BYTES:
            raise ValueError(f"request of {size} bytes")
        request = json.loads(_recv_exact(conn, size))
        if not isinstance(request.get("env"), dict) or not isinstance(request.get("cwd", ""), str):
            raise ValueError("bad request")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    conn.settimeout(None)
    return request, fds[0]


def _peer_is_us(conn: socket.socket) -> bool:
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        return uid == os.getuid()
    except (OSError, AttributeError):
        return False


def child_main(request: dict, out_fd: int, ready_w: int, close: list[int]) -> int:
    """In the forked child: become a worker of its own and run the cell (or the session)."""
    os.setsid()
    os.write(ready_w, b"1")
    os.close(ready_w)
    for fd in close:
        try:
            os.close(fd)
        except OSError:
            pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # a fork copies NumPy's global generator: reseed it as a fresh interpreter's would be
        numpy.random.seed()
    from nbworkers.distlib.worker import bootstrap  # (preloaded: these cost nothing in the child)
    from nbworkers.protocol import wire

    env = dict(request["env"])
    env[FORKED_ENV] = str(os.getppid())
    bootstrap.adopt_environment(env)
    from nbworkers.protocol.private.marker import write_run_id

    if not write_run_id(env.get(env_settings.RUN_ID.name, "")):  # its /proc environment: the zygote's until now
        print("--- nbworkers: could not mark this forked worker with its run's id in /proc (ownership checks will not "
              "recognise it; its host still stops it)", flush=True)
    cwd = os.environ.get(wire.ENV_CWD) or request.get("cwd") or os.getcwd()
    if sys.path and sys.path[0] == os.getcwd():
        sys.path[0] = cwd
    print(f"--- nbworkers: forked from zygote {os.getppid()} ({frameworks.current().IMPORTED} already imported)",
          flush=True)
    return bootstrap.main()


class Zygote:
    def __init__(self, path: str, idle_timeout: float = 0.0):
        self.path = path
        self.idle_timeout = idle_timeout  # seconds with no child and no fork before it exits (0: never)
        self.last_busy = time.monotonic()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        os.chmod(path, 0o600)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, socket.socket | None] = {}  # pid -> its host's connection (None: it hung up)
        self.by_conn: dict[socket.socket, int] = {}
        self.closing = False

    def serve(self) -> int:
        global _baseline_tasks
        _baseline_tasks = os_threads()
        print(f"nbworkers zygote {os.getpid()}: ready ({_baseline_tasks} OS threads)", flush=True)
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "kernel")
        while True:
            for key, _ in self.selector.select(LOOP_INTERVAL):
                if key.data == "accept":
                    conn, _ = self.listener.accept()
                    self._handle(conn)
                elif key.data == "kernel":
                    if not os.read(sys.stdin.fileno(), 4096):  # the kernel is gone, or it dropped this zygote
                        self._closing()
                else:
                    self._host_spoke(key.fileobj)  # type: ignore[arg-type]  # registered sockets only
            self._reap()
            if self.children:
                self.last_busy = time.monotonic()
            elif not self.closing and self.idle_timeout and time.monotonic() - self.last_busy > self.idle_timeout:
                print(f"nbworkers zygote {os.getpid()}: idle for {self.idle_timeout:g} s, exiting "
                      "(the kernel starts a new one for its next run)", flush=True)
                self._closing()
            if self.closing and not self.children:
                return 0

    def _handle(self, conn: socket.socket) -> None:
        try:
            if not _peer_is_us(conn):
                raise PermissionError("the peer is another user")
            request, out_fd = read_request(conn)
        except Exception as error:
            print(f"nbworkers zygote: bad request: {error!r}", flush=True)
            conn.close()
            return
        try:
            reason = fork_refusal()
            if reason is not None:
                conn.sendall(f"refused {reason}\n".encode())
                conn.close()
                return
            ready_r, ready_w = os.pipe()
            close = [self.listener.fileno(), conn.fileno(), ready_r, *(c.fileno() for c in self.by_conn)]
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = child_main(request, out_fd, ready_w, close)
                except SystemExit as stop:
                    code = stop.code if isinstance(stop.code, int) else 1
                except BaseException:
                    traceback.print_exc()
                finally:
                    try:
                        sys.stdout.flush()
                        sys.stderr.flush()
                    finally:
                        os._exit(code)
            os.close(ready_w)
            os.read(ready_r, 1)  # the child has its own session: the host may signal its group now
            os.close(ready_r)
            self.children[pid] = conn
            self.by_conn[conn] = pid
            self.selector.register(conn, selectors.EVENT_READ, "host")
            conn.sendall(f"pid {pid}\n".encode())
        except OSError as error:
            print(f"nbworkers zygote: fork failed: {error!r}", flush=True)
            conn.close()
        finally:
            os.close(out_fd)

    def _host_spoke(self, conn: socket.socket) -> None:
        """A host sends nothing after its request: readable means it closed (died): stop its worker."""
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        if data:
            return
        pid = self.by_conn.pop(conn, None)
        self.selector.unregister(conn)
        conn.close()
        if pid is not None:
            self.children[pid] = None
            _killpg(pid)

    def _reap(self) -> None:
        """Collect exited children. Each one's process group is killed *before* it is reaped: while the exited
        child is a zombie its pid (and so its group id) cannot be reused, so what is killed is what it left."""
        while self.children:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            pid = info.si_pid
            _killpg(pid)  # whatever the worker left in its group, while the pid is still the zombie's
            _, status = os.waitpid(pid, 0)
            conn = self.children.pop(pid, None)
            if conn is not None:
                self.by_conn.pop(conn, None)
                self.selector.unregister(conn)
                try:
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                conn.close()

    def _closing(self) -> None:
        """Fork no more; exit once the children still running have ended. Their hosts stop them when the kernel
        died (end of file on their stdin too); a child whose host dies is killed here (``_host_spoke``); a
        zygote the kernel dropped (``zygotes_max``) lets the workers of a running cluster finish."""
        self.closing = True
        self.selector.unregister(self.listener)
        self.selector.unregister(sys.stdin.fileno())
        self.listener.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nbworkers-zygote")
    parser.add_argument("--socket", required=True, help="the Unix socket to serve on (in a private directory)")
    parser.add_argument("--idle-timeout", type=float, default=0.0,
                        help="seconds with no running child and no fork before it exits (0: never)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    started = time.monotonic()
    zygote = Zygote(args.socket, args.idle_timeout)  # bound before the imports: hosts may connect and wait meanwhile
    gc.disable()  # no collection passes over what the imports build (Python's recipe for a fork server: gc.freeze)
    preload()
    check_internals()
    freeze_imports()
    print(f"nbworkers zygote {os.getpid()}: imports took {time.monotonic() - started:.1f} s "
          f"({time.process_time():.1f} s of CPU)", flush=True)
    zygote.last_busy = time.monotonic()  # idle counts from the end of the imports
    try:
        code = zygote.serve()
    finally:
        try:
            os.unlink(args.socket)
        except OSError:
            pass
    leave(code)
    return code


def leave(code: int) -> None:
    """Exit now, without the interpreter's finalisation: this process ran nothing but imports, and tearing down
    TensorFlow's or JAX's (their atexit functions, collections over ~670,000 objects) took 10-13 s of CPU on a
    machine at load 10 (seen: a dropped zygote outliving its last worker by that much, beside busy processes)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
