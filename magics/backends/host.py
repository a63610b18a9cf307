"""The worker host: a small supervisor process between the kernel and one worker interpreter.

``python -m nbworkers.magics.backends.host --log PATH --grace S -- PYTHON -m nbworkers.distlib.bootstrap``

It starts the worker in a session and process group of its own, then

- copies everything the worker writes to stdout and stderr (TensorFlow's C++ logs on fd 2 included) into
  the worker's log file and, batched, to the kernel over the relay — nothing is lost when the worker is
  killed, because this process, not the worker, holds the pipe;
- watches its stdin, a pipe from the kernel: ``stop`` stops the worker group, ``stacks`` makes the worker
  dump its Python stacks (SIGUSR1, see bootstrap), and end-of-file — the kernel died, even by ``kill -9`` —
  stops the worker group at once;
- on SIGTERM stops the worker group (TERM, a grace period, KILL), then reports the worker's exit code and
  exits with it (128+N when the worker was killed by signal N).

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
import time

LOG_BATCH_INTERVAL = 0.05  # seconds between relay messages carrying log output
LOG_BATCH_MAX_CHARS = 256 * 1024  # send early when this much output is pending


def kill_group(pgid: int, grace: float) -> None:
    """SIGTERM the process group, wait up to ``grace`` seconds for it to go, then SIGKILL it."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(…, 0) also succeeds for zombies; a group of only zombies is gone for our purposes.
    import psutil

    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


class LogForwarder:
    """Reads the worker's output pipe; writes it to the log file at once and to the relay in batches."""

    def __init__(self, pipe, log_file, sender):
        self._pipe = pipe
        self._log = log_file
        self._sender = sender
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending: list[str] = []
        self._pending_chars = 0
        self._lock = threading.Lock()
        self._done = threading.Event()

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
            self._log.write(chunk)
            text = self._decoder.decode(chunk)
            if text:
                with self._lock:
                    self._pending.append(text)
                    self._pending_chars += len(text)
                    urgent = self._pending_chars >= LOG_BATCH_MAX_CHARS
                if urgent:
                    self.flush()
        tail = self._decoder.decode(b"", final=True)
        if tail:
            with self._lock:
                self._pending.append(tail)
        self._done.set()
        flusher.join()
        self.flush()

    def _flush_loop(self) -> None:
        while not self._done.wait(LOG_BATCH_INTERVAL):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending, self._pending_chars = self._pending, [], 0
        if pending and self._sender is not None:
            self._sender.send("log", lines=["".join(pending)])


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nbworkers-host")
    parser.add_argument("--log", required=True, help="the worker's log file (appended to)")
    parser.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--role", default="worker")
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
    log_file = open(args.log, "ab", buffering=0)
    try:
        worker = subprocess.Popen(
            args.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as error:
        log_file.write(f"nbworkers: could not start the worker {args.command[0]!r}: {error}\n".encode())
        return 127

    # Only now pay for zmq and jupyter_client: the worker is already importing TensorFlow.
    from nbworkers.distlib.wire import Sender

    sender = Sender.from_env()
    if sender is not None:
        sender.send("hello", pid=worker.pid, host=socket.gethostname(), role=args.role, python=args.command[0])

    stop_once = threading.Lock()

    def stop_worker() -> None:
        if stop_once.acquire(blocking=False):
            kill_group(worker.pid, args.grace)

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

    LogForwarder(worker.stdout, log_file, sender).run()
    code = worker.wait()
    # The worker is gone; whatever it left in its group (rare) goes too.
    if group_alive(worker.pid):
        kill_group(worker.pid, 0)
    if sender is not None:
        sender.send("exit", code=code)
        sender.close()
    log_file.close()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
