"""The worker host: a small supervisor process between the kernel and one worker interpreter.

``python -m nbworkers.host.worker_host --log PATH --grace S -- PYTHON -m nbworkers.distlib.worker.bootstrap``

It starts the worker in a session and process group of its own, then

- copies everything the worker writes to stdout and stderr (TensorFlow's C++ logs on fd 2 included) into
  the worker's log file and, batched, to the kernel over the relay — nothing is lost when the worker is
  killed, because this process, not the worker, holds the pipe;
- watches its stdin, a pipe from the kernel: ``stop`` stops the worker group, ``stacks`` makes the worker
  dump its Python stacks (SIGUSR1, see bootstrap), and end-of-file — the kernel died, even by ``kill -9`` —
  stops the worker group at once;
- on SIGTERM stops the worker group, then reports the worker's exit code and exits with it (128+N when the
  worker was killed by signal N);
- with ``--cell-end`` (every launch of nbworkers' own: ``host/command.py``), an exit with 0 counts only when the
  worker said its cell ran to its end (``wire.CELL_END_LINE``); else the host ends the log with
  ``wire.ENDED_EARLY_LINE`` and the worker's last output, and exits with ``wire.ENDED_EARLY_EXIT_CODE``.

Stopping the group (``procs.kill.interrupt_group``): SIGINT first — the worker gets ``KeyboardInterrupt`` in its
main thread, so the cell's ``finally:`` blocks and ``atexit`` run (``distlib/worker/stop_signal.py``) —, SIGTERM
after ``NBWORKERS_STOP_INTERRUPT_GRACE`` seconds if it is still there (a worker blocked in C code), SIGKILL at
``--grace`` (the ``stop_grace`` setting).

With ``--zygote SOCKET`` (``zygotes``, the default for local workers) the worker is not spawned but forked by
the kernel's zygote, TensorFlow already imported (``zygote_client``): this host passes it the write end of its
output pipe and the worker's environment, gets the worker's pid (its own session) and, when it ends, its exit
code; everything else above is unchanged. When the zygote cannot fork, the worker is spawned (noted in its log).

Modelled on Horovod's ``safe_shell_exec``. It imports neither TensorFlow nor IPython.
"""

from __future__ import annotations

import argparse
import codecs
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, BinaryIO

from nbworkers.protocol import env_settings
from nbworkers.protocol.lines import cut_note
from nbworkers.protocol.private.files import open_own
from nbworkers.protocol.wire import CELL_END_LINE, ENDED_EARLY_EXIT_CODE, ENDED_EARLY_LINE

if TYPE_CHECKING:  # imported when needed: a host starts fast
    from nbworkers.host.zygote_client import ForkedWorker
    from nbworkers.protocol.wire import Sender

MAX_LINE_CHARS_ENV = env_settings.MAX_LINE_CHARS.name  # longest line sent to the kernel (the log file keeps it all)
DEFAULT_MAX_LINE_CHARS = env_settings.MAX_LINE_CHARS.default
MIN_LINE_CHARS = 80  # a smaller NBWORKERS_MAX_LINE_CHARS is raised to this
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies (Linux)
CELL_END_MARK = CELL_END_LINE.encode()
RECENT_BYTES = 4096  # output kept to find the end line across chunks, and the last line


def _die_with_host():
    """A ``preexec_fn`` that makes the worker get SIGKILL when this host dies (Linux; elsewhere only the SIGINT
    below): a host killed before its worker's ``hello`` — the kernel does not know the worker's pid yet — leaves
    no worker. It also gives SIGINT back its default, which this host ignores and an ``exec`` would pass on: a stop
    starts with SIGINT (``stop_group``), and Python makes it a ``KeyboardInterrupt`` only when it starts with the
    default."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    host = os.getpid()

    def arm() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != host:  # the host died between fork and prctl
            os._exit(137)

    return arm


class LineCap:
    """Cuts output lines (text between newlines or carriage returns) to ``limit`` characters, with a note; the
    relay and the kernel never see an endless line (the log file gets every byte). ``protocol/lines.py``'s
    ``cap_line`` over a stream: a line may come in many chunks, so the characters already sent count."""

    def __init__(self, limit: int):
        self.limit = limit
        self._length = 0  # characters of the current line so far
        self._cut = False

    def __call__(self, text: str) -> str:
        if not self._cut and self._length + len(text) <= self.limit:  # the usual case: no line can be too long
            last = max(text.rfind("\n"), text.rfind("\r"))
            self._length = self._length + len(text) if last == -1 else len(text) - last - 1
            return text
        out = []
        start = 0
        while start < len(text):
            ends = [i for i in (text.find("\n", start), text.find("\r", start)) if i != -1]
            end = min(ends) + 1 if ends else len(text)
            piece = text[start:end]
            start = end
            ended = piece[-1] in "\n\r"
            body = piece[:-1] if ended else piece
            room = self.limit - self._length
            if len(body) > room:
                if not self._cut:
                    out.append(body[:max(room, 0)] + cut_note(self.limit))
                    self._cut = True
            else:
                out.append(body)
            self._length += len(body)
            if ended:
                out.append(piece[-1])
                self._length, self._cut = 0, False
        return "".join(out)


def max_line_chars() -> int:
    return max(MIN_LINE_CHARS, env_settings.MAX_LINE_CHARS.get())


def kill_group(pgid: int, grace: float) -> None:
    """SIGTERM the process group, wait up to ``grace`` seconds for it to go, then SIGKILL it (``process_kill``;
    imported here only when needed: psutil is not loaded at the host's start)."""
    from nbworkers.procs.kill import kill_group as kill

    kill(pgid, grace)


def stop_group(pgid: int, grace: float) -> None:
    """SIGINT the process group, SIGTERM after the interrupt grace, SIGKILL at ``grace`` seconds, each only while
    it is there (``procs.kill.interrupt_group``; imported when needed, as above)."""
    from nbworkers.procs.kill import interrupt_group

    interrupt_group(pgid, grace, env_settings.STOP_INTERRUPT_GRACE.get())


def group_alive(pgid: int) -> bool:
    """Does the process group have a member that is not a zombie? (``process_kill``)"""
    from nbworkers.procs.kill import group_alive as alive

    return alive(pgid)


class LogForwarder:
    """Reads the worker's output pipe; writes it to the log file at once and to the relay in batches."""

    def __init__(self, pipe, log_file: BinaryIO, sender: Sender | None):
        self._pipe = pipe
        self._log = log_file
        self._sender = sender
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending: list[str] = []
        self._pending_chars = 0
        self._cap = LineCap(max_line_chars())
        self._batch_interval = env_settings.LOG_BATCH_INTERVAL.get()  # seconds between relay messages of output
        self._batch_chars = env_settings.LOG_BATCH_CHARS.get()  # send early when this much output is pending
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.cell_ended = False  # the worker wrote wire.CELL_END_LINE
        self._recent = b""  # the end of the output so far: the end line may come in two chunks; the last line

    def _take(self, chunk: bytes) -> bool:
        """Record one chunk of output (caller holds the lock); True when a relay batch should go now."""
        self._log.write(chunk)
        recent = self._recent + chunk
        self.cell_ended = self.cell_ended or CELL_END_MARK in recent
        self._recent = recent[-RECENT_BYTES:]
        text = self._cap(self._decoder.decode(chunk))
        if CELL_END_LINE in text:  # for this host only (one write, so one chunk): the log file keeps it
            text = text.replace(CELL_END_LINE, "")
        if text:
            self._pending.append(text)
            self._pending_chars += len(text)
        return self._pending_chars >= self._batch_chars

    def last_output(self) -> str:
        """The worker's last line of output that is not nbworkers' own (where it was when it left)."""
        lines = self._recent.decode("utf-8", errors="replace").replace("\r", "\n").splitlines()
        own = [line for line in lines if line.strip() and not line.startswith("--- nbworkers: ")]
        return own[-1].strip()[:MIN_LINE_CHARS * 2] if own else ""

    def run(self) -> None:
        flusher = threading.Thread(target=self._flush_loop, name="nbworkers-log-flush", daemon=True)
        flusher.start()
        fd = self._pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            with self._lock:
                urgent = self._take(chunk)
            if urgent:
                self.flush()
        with self._lock:
            tail = self._cap(self._decoder.decode(b"", final=True))
            if tail:
                self._pending.append(tail)
        self._done.set()
        flusher.join()
        self.flush()

    def _flush_loop(self) -> None:
        while not self._done.wait(self._batch_interval):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending, self._pending_chars = self._pending, [], 0
            sender = self._sender
        if pending and sender is not None:
            sender.send("log", lines=["".join(pending)])


def ended_early(log_file: BinaryIO, last_output: str) -> int:
    """The worker exited with 0 before its cell's end: say so at the end of its log, where the kernel's classification
    reads it (``failures.WorkerEndedEarly``), and give the exit code that means it."""
    where = f"its last output: {last_output}" if last_output else "it wrote nothing"
    log_file.write(f"{ENDED_EARLY_LINE} the worker exited with code 0 before the end of its cell ({where})\n".encode())
    return ENDED_EARLY_EXIT_CODE


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nbworkers-host")
    parser.add_argument("--log", required=True, help="the worker's log file (appended to)")
    parser.add_argument("--grace", type=float, default=5.0, help="seconds from a stop's SIGINT to SIGKILL")
    parser.add_argument("--role", default="worker")
    parser.add_argument("--cell-end", action="store_true",
                        help="an exit with 0 counts only after the worker's wire.CELL_END_LINE (nbworkers' bootstrap)")
    parser.add_argument("--zygote", default="", help="fork the worker from the zygote at this socket (zygotes.py); "
                        "spawn the command when it cannot")
    parser.add_argument("--zygote-pid", type=int, default=None,
                        help="the zygote's pid: the process at --zygote must be that one (SO_PEERCRED)")
    parser.add_argument("--zygote-timeout", type=float, default=120.0, help="seconds to wait for the zygote's answer")
    parser.add_argument("--zygote-connect-timeout", type=float, default=15.0,
                        help="seconds to retry connecting to a zygote that has not bound its socket yet")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the worker's command line")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no worker command given after --")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the notebook's Interrupt button is not for workers
    log_file = os.fdopen(open_own(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab", buffering=0)
    try:
        worker: subprocess.Popen | ForkedWorker | None = None
        if args.zygote:  # forked, TensorFlow already imported (zygote_client.py)
            from nbworkers.host.zygote_client import fork_worker  # lazily: only a forked worker needs it

            worker = fork_worker(args.zygote, args.zygote_timeout, log_file, args.zygote_connect_timeout,
                                 args.zygote_pid)
        if worker is None:
            worker = subprocess.Popen(
                args.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_die_with_host(),
            )
    except OSError as error:
        log_file.write(f"nbworkers: could not start the worker {args.command[0]!r}: {error}\n".encode())
        return 127

    # Only now pay for zmq and jupyter_client: the worker is already importing TensorFlow.
    from nbworkers.protocol.wire import Sender

    sender = Sender.from_env()
    if sender is not None:
        sender.send("hello", pid=worker.pid, host=socket.gethostname(), role=args.role, python=args.command[0])
    forwarder = LogForwarder(worker.stdout, log_file, sender)

    stop_once = threading.Lock()

    def stop_worker() -> None:
        if stop_once.acquire(blocking=False):
            stop_group(worker.pid, args.grace)

    def watch_kernel() -> None:
        for line in sys.stdin:
            command = line.strip()
            if command == "stop":
                stop_worker()
            elif command == "stacks":
                try:
                    os.kill(worker.pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
        stop_worker()  # end of file: the kernel is gone

    threading.Thread(target=watch_kernel, name="nbworkers-kernel-watch", daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=stop_worker, daemon=True).start())

    forwarder.run()
    code = worker.wait()
    # The worker is gone; whatever it left in its group (rare) goes too.
    if group_alive(worker.pid):
        kill_group(worker.pid, 0)
    if code == 0 and args.cell_end and not forwarder.cell_ended:
        code = ended_early(log_file, forwarder.last_output())
    if sender is not None:
        sender.send("exit", code=code)
        sender.close()
    log_file.close()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
