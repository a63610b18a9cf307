"""The worker entry point: ``python -m nbworkers.distlib.worker.bootstrap`` runs one notebook cell as ``__main__``.

The launcher hands it, through the environment (names in ``wire``): ``TF_CONFIG``, the relay's address and
key, the worker's index and launch generation, the path of the cell's code, an optional file of pushed
kernel variables, and the directory the cell runs in (put first on ``sys.path`` so that modules written with
``%%writefile`` import as in the tutorials).

``SIGUSR1`` dumps every thread's Python stack into the worker's log (the no-progress watchdog uses it).
``SIGINT`` is the host's stop (``stop_signal``): a ``KeyboardInterrupt`` in the cell, whose ``finally:`` blocks run,
then the ``atexit`` functions; the worker exits with ``stop_signal.STOPPED_EXIT_CODE``, and no ``failed`` status: the
kernel, which asked for the stop, records the worker as stopped.

A worker forked from a zygote (``nbworkers.distlib.worker.zygote``) does not start here: the zygote imported
its framework's modules ahead (``distlib/frameworks``), and its child takes the run's environment
(``adopt_environment``) and calls ``main()``.
"""

from __future__ import annotations

import atexit
import builtins
import faulthandler
import os
import pickle
import signal
import sys
import threading
import traceback
import types

from nbworkers.distlib import frameworks
from nbworkers.distlib.frameworks import quiet_imports
from nbworkers.distlib.worker import startup, stop_signal
from nbworkers.protocol import env_settings, tf_messages, wire
from nbworkers.protocol.private import files as own_files
from nbworkers.protocol.private import netns
from nbworkers.protocol.statuses import WorkerStatus

ATEXIT_TIMEOUT_S = 10.0  # the atexit functions' time at a worker's end; then it leaves without waiting for them


def load_pushed(path: str | None, key: str = "") -> dict:
    """Variables the kernel pushed (``%%worker --push``). Kernel to worker only: the kernel never unpickles.
    The file must be this user's own (no symlink) and carry the run's signature (``own_files.verify_push``,
    the relay's key): anything else raises before a byte of it is unpickled."""
    if not path:
        return {}
    return pickle.loads(own_files.verify_push(key, own_files.read_own(path)))


def read_cell(code_path: str) -> str:
    """The cell's code, from this user's own ``cell.py`` (no symlink: ``own_files.open_own``)."""
    return own_files.read_own(code_path).decode("utf-8")


def print_user_traceback(code_path: str) -> str:
    """Print the exception with the bootstrap's own frames cut off; return its last line."""
    kind, error, tb = sys.exc_info()
    while tb is not None and tb.tb_frame.f_code.co_filename != code_path:
        tb = tb.tb_next
    if tb is None and error is not None:
        tb = error.__traceback__
    lines = traceback.format_exception(kind, error, tb)
    sys.stderr.write("".join(lines))
    sys.stderr.flush()
    return lines[-1].strip()


def main() -> int:
    netns.join_from_env()  # the run's private network namespace, while this process has one thread (netns.py)
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    whole_lines()
    stop_signal.install()  # the host's stop: KeyboardInterrupt in the cell (a spawned worker inherits SIGINT ignored)
    code_path = os.environ[wire.ENV_CODE]
    cwd = os.environ.get(wire.ENV_CWD) or os.getcwd()
    os.chdir(cwd)
    sys.path.insert(0, cwd)
    sys.argv = [code_path]
    sender = wire.process_sender()

    try:
        source = read_cell(code_path)
    except OSError as error:
        print(f"nbworkers: the cell cannot be read: {error}", file=sys.stderr, flush=True)
        if sender is not None:
            sender.send("status", state=WorkerStatus.FAILED.value, detail=str(error))
            sender.close()
        return 1
    module = types.ModuleType("__main__")
    module.__file__ = code_path
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module

    exit_code = 0
    detail = ""
    reached_end = False
    try:
        # a spawned worker imports its framework with collections off, as a zygote does (forked: imported already)
        quiet_imports.install(frameworks.current().preload())
        # the framework's bootstrap (distlib/frameworks: TensorFlow's import hooks, JAX's distributed initialisation),
        # before unpickling: pushed tensors may import TensorFlow
        frameworks.current().before_user_code()
        module.__dict__.update(load_pushed(os.environ.get(wire.ENV_PUSH), os.environ.get(wire.ENV_KEY, "")))
        if sender is not None:
            sender.send("status", state=WorkerStatus.RUNNING.value)
        from nbworkers.distlib.worker import roles  # --ps: worker/ps tasks serve instead; the evaluator's hooks

        if env_settings.SESSION.is_set():  # %%worker --session: serve cells (distlib/worker/session.py)
            from nbworkers.distlib.worker import session as session_worker  # only a session's workers load it

            exit_code = session_worker.main(module)
        elif not roles.run_role():
            exec(compile(source, code_path, "exec"), module.__dict__)
        reached_end = exit_code == 0
    except SystemExit as stop:
        exit_code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
        reached_end = exit_code == 0  # the cell asked to leave: its end
    except KeyboardInterrupt:
        if stop_signal.requested():
            print(f"--- nbworkers: stopped ({stopped_where(code_path)})", file=sys.stderr)
            exit_code = stop_signal.STOPPED_EXIT_CODE
        else:  # raised by the cell itself
            detail = print_user_traceback(code_path)
            exit_code = 1
    except BaseException as error:
        if stop_signal.requested() and came_from_the_stop(error):
            print(f"--- nbworkers: stopped ({stopped_where(code_path)}, inside a collective op)", file=sys.stderr)
            exit_code = stop_signal.STOPPED_EXIT_CODE
        else:
            detail = print_user_traceback(code_path)
            exit_code = 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the cell is over: a stop now has nothing left to interrupt
    if reached_end and not stop_signal.requested():
        say_cell_ended()
    try:
        startup.after_user_code()  # the last metrics, cleanup
    except Exception:
        traceback.print_exc()
    # stopped: interrupted, or ended (a cell that caught the KeyboardInterrupt), or left after a preemption save
    stopped = stop_signal.requested() and exit_code in (stop_signal.STOPPED_EXIT_CODE, 0, wire.PREEMPTION_EXIT_CODE)
    if stopped and exit_code == 0:
        exit_code = stop_signal.STOPPED_EXIT_CODE
    frameworks.current().leaving(exit_code)
    run_atexit(exit_code)
    sys.stdout.flush()
    sys.stderr.flush()
    if sender is not None:
        if not stopped:  # (stopped: the kernel asked for it and says so itself; a retired task keeps its detail)
            ended = WorkerStatus.FINISHED if exit_code == 0 else WorkerStatus.FAILED
            sender.send("status", state=ended.value, detail=detail)
        sender.close()
    return exit_code


def whole_lines() -> None:
    """Each line the cell prints reaches the host in one write, as in a terminal (line buffering; the interpreter runs
    with ``-u``, which made ``print("CHECKSUM", x)`` write its parts one by one): a line is never cut by what another
    thread writes at the same moment. Seen: TensorFlow's preemption watcher thread printed its traceback when its
    peer had left, between ``CHECKSUM`` and its value, and the run's last line was nowhere whole (make test's chaos
    and custom-loop tests, issue 39). A flush still writes a partial line at once (Keras' progress bar does)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, write_through=False)  # type: ignore[union-attr]
        except (AttributeError, ValueError):  # not a TextIOWrapper (replaced by the caller)
            pass


def say_cell_ended() -> None:
    """Tell the worker's host that the cell ran to its end (``wire.CELL_END_LINE``, on file descriptor 2: the host's
    pipe, whatever the cell did to ``sys.stderr``): an exit with 0 without it is no finish (host/worker_host.py)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    try:
        os.write(2, wire.CELL_END_LINE.encode())
    except OSError:
        pass


def came_from_the_stop(error: BaseException) -> bool:
    """After a Stop, the error the cell ended with is the Stop's own: its KeyboardInterrupt replaced inside a
    TensorFlow op (pybind11's MISMATCH RuntimeError), or a collective op whose peer the same Stop ended first
    (UnavailableError "Socket closed", CancelledError: protocol/tf_messages.py). The worker reads "stopped" with one
    line, not a traceback that looks like a crash (issue 43)."""
    text = f"{type(error).__name__}: {error}"
    return tf_messages.mentions(text, tf_messages.INTERRUPTED_INSIDE_OP) or tf_messages.mentions(
        text, tf_messages.PEER_LOST_MARKERS)


def stopped_where(code_path: str) -> str:
    """Where the stop's ``KeyboardInterrupt`` met the cell: ``at line 7 of the cell`` (its deepest line)."""
    tb = sys.exc_info()[2]
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == code_path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"at line {line} of the cell" if line is not None else "outside the cell's own lines"


def run_atexit(exit_code: int, timeout: float = ATEXIT_TIMEOUT_S) -> None:
    """Run the ``atexit`` functions now (the worker leaves with ``os._exit``, which skips them), for at most
    ``timeout`` seconds: then the worker leaves with ``exit_code`` without waiting for the rest."""
    def give_up() -> None:
        if not finished.wait(timeout):
            print(f"nbworkers: the atexit functions took more than {timeout:g} s: leaving without them",
                  file=sys.stderr, flush=True)
            os._exit(exit_code)

    finished = threading.Event()
    threading.Thread(target=give_up, name="nbworkers-atexit-timeout", daemon=True).start()
    try:
        atexit._run_exitfuncs()
    except BaseException:  # (atexit prints a failing function's traceback itself)
        pass
    finally:
        finished.set()


def adopt_environment(env: dict[str, str]) -> None:
    """Make ``os.environ`` (and the C library's environment TensorFlow reads) exactly ``env``."""
    for name in list(os.environ):
        if name not in env:
            del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


if __name__ == "__main__":
    code = main()
    # TensorFlow's gRPC and collective threads can keep a finished worker from exiting; the cell is done and
    # its output flushed, so leave now without waiting for them.
    os._exit(code)
