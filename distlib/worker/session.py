"""A session worker (``%%worker --session NAME``): a worker that stays alive and runs cell after cell.

The bootstrap hands over to ``main()`` when ``NBWORKERS_SESSION`` is set. After the usual start-up (directory,
``sys.path``, ``__main__``, distlib's hooks, pushed variables) the worker

- keeps one namespace for every cell (a ``__main__`` module's dict, as IPython's ``user_ns``): the strategy,
  the model, datasets and iterators made by one cell are there for the next;
- listens for the kernel's commands on a DEALER socket in a thread of its own (``session_wire``: signed,
  generation- and sequence-checked; CurveZMQ with the relay's keys on ``--backend ray``) that blocks in
  ``recv``: an idle session costs no CPU;
- runs ``run``, ``pull`` and ``push`` commands in the main thread, one at a time, in order; ``pull`` sends the
  value to the kernel's data socket and ``push`` brings values in, both as raw frames (``session_data``: the
  signature covers a Poly1305 MAC of the frames; arrays as ``.npy``, read in place with ``np.frombuffer``);
- answers a Stop (``pause``, then ``resume`` with a step) by raising ``KeyboardInterrupt`` at the same training
  step as every other worker (``step_point``: each eager call of a distributed step, ``compat/step_calls.py``, or
  each report in a cell that has none), ``interrupt`` with SIGINT to its main thread (a plain
  ``KeyboardInterrupt``, for cells with no step at all), and ``abort`` by aborting this process's pending
  collective ops first
  (``context.abort_collective_ops``, as MultiWorkerMirroredStrategy's own health check does), for a cell
  blocked in a collective whose peer failed, where a KeyboardInterrupt alone cannot reach it.

Each cell's output is framed by marker lines (``session_wire.marker``) and its end reported on the relay with
its status and traceback. A cell's last expression is evaluated apart (as IPython's ``ast`` handling of the last
expression) and its MIME bundle sent as the cell's result; ``display(...)`` and ``plt.show()`` send theirs
(``rich/output.py``): the kernel shows them in the notebook cell.
"""

from __future__ import annotations

import linecache
import os
import queue
import signal
import sys
import threading
import traceback
import types
import uuid
from typing import Any

from nbworkers.distlib import reporting
from nbworkers.distlib.compat import eager_context, step_calls
from nbworkers.distlib.saved_state.rebuild import Bindings, RestoreOnRebuild
from nbworkers.distlib.worker import step_points, stop_signal
from nbworkers.distlib.worker.rich.cell_code import split_last_expression, user_traceback
from nbworkers.distlib.worker.rich.output import RichOutput, install_rich_output
from nbworkers.protocol import env_settings, session_data, session_shm, session_wire, wire


class SessionWorker:
    def __init__(self, module: types.ModuleType):
        self.namespace = module.__dict__
        self.key = os.environ[wire.ENV_KEY]
        self.index = int(os.environ.get(wire.ENV_WORKER, "0"))
        self.gen = int(os.environ.get(wire.ENV_GENERATION, "0"))
        self.sender = wire.process_sender()
        self.signer = wire.Signer(self.key)
        self._data: tuple[str, Any] | None = None  # the kernel's data socket: (address, PUSH socket)
        self._shm: Any = None  # session_shm.ShmFiles of pull replies (local sessions: a spare file kept ready)
        self.commands: queue.Queue = queue.Queue()
        self.in_cell = False
        self.cell = 0
        self.aborted = False
        self.dropped = 0
        # Stop at a step every worker agrees on (see step_point): the kernel's pause, then resume(stop_at)
        self.steps = 0
        self.step_calls = 0  # this cell's distributed step calls (compat/step_calls.py): once one ran, only they count
        self.pause_requested = False
        self.stop_at: int | None = None
        self.last_step: int | None = None  # the step of this cell's last report (what its card shows last)
        self.resumed = threading.Event()
        self._main_ident = threading.main_thread().ident
        self.rich = RichOutput(self._send, self.index)  # display(), plt.show(), the last expression: to the kernel
        self.namespace.setdefault("display", self.rich.display)  # as in IPython's namespace
        self.bindings = Bindings()  # the cell that last bound each name (the save says it)
        self.rebuilds: RestoreOnRebuild | None = None  # saved trackables put back when a cell rebuilds them
        # every distributed step call is a step point (compat/step_calls.py); it knows when the cell is inside one
        self.step_hook = step_calls.install(lambda: self.step_point(call=True))
        step_points.register(lambda: self.step_point(call=True))  # and each step of a loop it does not see (JAX)

    # ------------------------------------------------------------------------------ the command thread
    def listen(self, address: str) -> None:
        import zmq

        context = zmq.Context()
        socket = context.socket(zmq.DEALER)
        socket.setsockopt(zmq.IDENTITY, uuid.uuid4().hex.encode())
        socket.setsockopt(zmq.LINGER, 0)
        curve = session_wire.client_curve(os.environ)
        if curve is not None:  # --backend ray: encrypted, and only this node's client key is let in
            socket.curve_serverkey, socket.curve_publickey, socket.curve_secretkey = (k.encode("ascii") for k in curve)
        socket.connect(address)
        signer = wire.Signer(self.key)
        socket.send_multipart(signer.frames("ready", {"worker": self.index, "gen": self.gen}))
        last_seq = 0
        while True:
            frames = socket.recv_multipart(copy=False)  # blocks: no polling while idle; blobs are not copied
            message = session_wire.verify([f.bytes for f in frames[:session_data.SIGNED_FRAMES]], self.key)
            if message is None:
                self.dropped += 1
                continue
            kind, content = message
            seq = content.get("seq")
            if content.get("gen") != self.gen or not isinstance(seq, int) or seq <= last_seq:
                self.dropped += 1  # another generation's, or replayed
                continue
            last_seq = seq
            if kind in ("run", "pull", "save", "shutdown"):
                self.commands.put((kind, content))
            elif kind == "push":  # a shared-memory push is opened (and its file unlinked) here, at once
                self.commands.put((kind, self._take_push(frames)))
            elif kind == "interrupt" and content.get("cell") == self.cell:
                self.interrupt()
            elif kind == "pause" and content.get("cell") == self.cell and self.in_cell:
                self.pause_requested = True
                if self.step_hook.in_step:  # pauses once this step is done: the kernel waits for it, not interrupts
                    self._send("cell", event="pausing", cell=self.cell, step=self.steps)
            elif kind == "resume" and content.get("cell") == self.cell and isinstance(content.get("stop_at"), int):
                self.stop_at = content["stop_at"]
                self.resumed.set()
            elif kind == "abort" and content.get("cell") == self.cell:
                self.abort(str(content.get("reason") or "aborted by nbworkers"))

    def interrupt(self) -> None:
        if self.in_cell and self._main_ident is not None:  # (the main thread's ident is always set)
            stop_signal.own_interrupt()  # this SIGINT ends the cell, not the session (a host's SIGINT is a stop)
            signal.pthread_kill(self._main_ident, signal.SIGINT)

    def abort(self, reason: str) -> None:
        """Unblock a cell waiting in a collective for a peer that gave up: abort this process's collectives
        (they stay unusable in this process afterwards: the kernel restarts the group), then interrupt."""
        if not self.in_cell:
            return
        try:
            self.aborted = eager_context.abort_collectives(
                reason, "a cell stuck in a collective is only interrupted, its collectives not aborted") or self.aborted
        except Exception as error:  # the interrupt below still applies
            print(f"nbworkers: could not abort collective ops: {error!r}", file=sys.stderr, flush=True)
        self.interrupt()

    def step_point(self, call: bool = False) -> None:
        """Where a Stop ends the cell: before each distributed step call (``call``: a ``tf.function`` whose trace ran
        ``strategy.run``/``reduce``, or an eager ``strategy.run``/``reduce``; ``compat/step_calls.py``), and at each
        report (distlib.fit, ReportCallback, report()) until the cell's first step call: every worker runs the same
        code, so the same count is the same point of it on every worker. On the kernel's ``pause`` the worker says
        at which step it is and waits; the kernel answers ``resume`` with the step at which every worker raises
        KeyboardInterrupt (the furthest one, plus one when a worker could not pause: it is inside that step's
        collective, waiting for the others). So no worker is left waiting in a collective for a peer that already
        stopped."""
        if not self.in_cell:
            return
        if call:
            self.step_calls += 1
        elif self.step_calls:  # a report beside step calls is not a step of its own
            return
        self.steps += 1
        if self.stop_at is None and self.pause_requested:
            self._send("cell", event="paused", cell=self.cell, step=self.steps)
            self.resumed.wait()  # a SIGINT (the fallback) still interrupts this wait
        if self.stop_at is not None and self.steps >= self.stop_at:
            raise KeyboardInterrupt

    def _on_sigint(self, signum, frame) -> None:
        if not stop_signal.take_own_interrupt():  # the host's: the session stops (serve() returns after the cell)
            stop_signal.note_stop()
            raise KeyboardInterrupt
        if self.in_cell:
            raise KeyboardInterrupt
        # between cells: nothing to interrupt

    # ------------------------------------------------------------------------------ the main thread
    def serve(self) -> int:
        signal.signal(signal.SIGINT, self._on_sigint)  # the cells' interrupts and the host's stop (stop_signal)
        while not stop_signal.requested():  # (a stop between cells raises KeyboardInterrupt out of get())
            kind, content = self.commands.get()
            if kind == "shutdown":
                return 0
            if kind == "run":
                self.rich.begin(int(content["cell"]), str(content.get("display") or "0"),
                                int(content.get("display_max_bytes") or self.rich.max_bytes))
                self.run_cell(int(content["cell"]), str(content["code"]), str(content.get("title") or ""))
            elif kind == "pull":
                self.pull(content)
            elif kind == "push":
                self.push(content)
            elif kind == "save":
                self.save(content)
        return 0  # stopped in a cell: the bootstrap reports the stop

    def run_cell(self, cell: int, code: str, title: str = "") -> None:
        # the traceback names the cell as the views do ("cell 3": the user's numbers skip nbworkers' own cells)
        filename = f"<session {title or f'cell {cell}'}>"
        code = "\n" + code  # line 1 is the cell's %%worker line: line numbers as in the notebook
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        self.cell, self.aborted = cell, False
        self.steps, self.step_calls, self.pause_requested, self.stop_at = 0, 0, False, None
        self.last_step = None
        self.resumed.clear()
        sys.stdout.write(session_wire.marker(cell, "start"))
        sys.stdout.flush()
        self._send("cell", event="start", cell=cell)
        status, error, text = "ok", "", ""
        try:
            self.in_cell = True
            self.bindings.before(self.namespace)
            body, last = split_last_expression(code, filename)
            exec(body, self.namespace)
            if last is not None:
                value = eval(last, self.namespace)
                if value is not None:
                    self.rich.show(value, source="result")
            self.rich.figures()  # figures the cell left open, as ipykernel's inline backend does
            if self.rebuilds is not None:
                self.rebuilds.restore_rebuilt(self.bindings.after(self.namespace, cell))
        except KeyboardInterrupt:
            self.in_cell = False
            status, error, text = "interrupted", "KeyboardInterrupt", user_traceback(filename)
        except BaseException as exc:  # SystemExit included: the session goes on
            self.in_cell = False
            status, text = "error", user_traceback(filename)
            error = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500] if str(exc) else type(exc).__name__
        finally:
            self.in_cell = False
            self.bindings.after(self.namespace, cell)  # also what a failed cell bound before its error
        stop_trace = ""
        if self.aborted and status != "ok":  # a peer failed (abort): what that raised here is not the cell's error
            status, error, stop_trace, text = "interrupted", "aborted", text, ""  # its traceback: in the log only
        elif status == "interrupted":  # a Stop, not a crash: one line in the cell, the traceback after its end marker
            error = (f"stopped at step {self.last_step}" if self.last_step is not None
                     else "stopped between two training steps" if self.step_calls else "stopped")
            stop_trace, text = text, ""
            sys.stderr.write(f"KeyboardInterrupt: {error} (traceback in this worker's log)\n")
        if text:
            sys.stderr.write(text)
        self._after_cell()
        self._send("cell", event="end", cell=cell, status=status, error=error,
                   traceback=text[-session_wire.MAX_TRACEBACK_CHARS:], aborted=self.aborted, step=self.last_step)
        sys.stdout.write(session_wire.marker(cell, "end"))
        sys.stdout.flush()
        if stop_trace:  # past the end marker: in the log file, not in the cell's output
            sys.stderr.write(stop_trace)
            sys.stderr.flush()

    def _after_cell(self) -> None:
        try:
            reporting.flush_reports()
        except Exception:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()

    def save(self, content: dict) -> None:
        """The kernel restarts the processes next (their collectives were aborted): save what the namespace holds
        (``distlib/saved_state/namespace.py``) and say what, in a ``saved`` cell event."""
        from nbworkers.distlib.saved_state import files as saved_files
        from nbworkers.distlib.saved_state import namespace as session_state

        report: dict[str, Any] = {"saved": [], "skipped": [], "dir": "", "error": ""}
        try:
            run_dir = env_settings.RUN_DIR.get()
            if not run_dir:
                raise RuntimeError("this worker has no run directory (NBWORKERS_RUN_DIR) to save into")
            report.update(session_state.save_namespace(self.namespace, run_dir, self.gen, self.index,
                                                       int(content.get("max_bytes") or session_wire.SAVE_MAX_BYTES),
                                                       built_in=self.bindings.built_in,
                                                       holder=int(content.get("holder") or 0)))
            print(f"nbworkers: saved {', '.join(e['name'] for e in report['saved']) or 'nothing'} into "
                  f"{report['dir']} before the restart", file=sys.stderr, flush=True)
            report["error"] = saved_files.stays_on_node(report["dir"])
        except Exception as error:
            report["error"] = f"{type(error).__name__}: {error}"[:500]
            traceback.print_exc()
        self._send("cell", event="saved", cell=int(content.get("cell") or self.cell or 1), **report)

    def pull(self, content: dict) -> None:
        """Evaluate the expression and send its value to the kernel's data socket (or the error, as text)."""
        from nbworkers.protocol import session_values  # lazily: NumPy, only when the kernel pulls a value

        fields = {"request": str(content.get("request")), "worker": self.index, "gen": self.gen, "error": None}
        max_bytes = int(content.get("max_bytes") or 0)
        try:
            value = eval(compile(str(content.get("expression")), "<pull>", "eval"), self.namespace)
            tree, blobs = session_values.encode(value)
            size = sum(memoryview(b).nbytes for b in blobs)
            if max_bytes and size > max_bytes:
                raise session_values.PullValueError(
                    f"the value is {size / 2**20:.1f} MiB, more than the pull limit "
                    f"({max_bytes / 2**20:.1f} MiB, setting pull_max_bytes): pull a slice, or save it to a file")
            frames = self._reply_frames(content, {**fields, "value": tree}, blobs, size)
            if sum(memoryview(f).nbytes for f in frames[:session_data.SIGNED_FRAMES]) > session_data.MAX_JSON_BYTES:
                raise session_values.PullValueError(
                    "the value's non-array part is larger than 1 MiB: put large data in numpy arrays")
        except BaseException as error:  # the kernel raises it; the session goes on
            if isinstance(error, (SystemExit, KeyboardInterrupt)):
                error = RuntimeError(f"{type(error).__name__} while evaluating the pull expression")
            frames = session_data.pack(self.key, self.signer, "pull", {**fields, "value": None,
                                                             "error": f"{type(error).__name__}: {error}"[:2000]}, [])
        socket = self._data_socket(str(content.get("data")))
        socket.send_multipart(frames, copy=False, track=True).wait()  # sent: the value may change after this

    def _take_push(self, frames: list) -> tuple[dict, list] | Exception:
        """A push's checked ``(content, blobs)`` (``session_data.unpack``; a shared-memory file mapped), or why not."""
        try:
            return session_data.unpack(frames, self.key, max_bytes=1 << 62, open_shm=session_shm.open_named)[1:]
        except Exception as error:
            return error

    def push(self, taken: tuple[dict, list] | Exception) -> None:
        """Assign the pushed values in the namespace (the kernel signed them; pickles only if it sent some)."""
        from nbworkers.protocol import session_values

        try:
            if isinstance(taken, Exception):
                raise taken
            values = session_values.decode(taken[0].get("values"), taken[1], allow_pickle=True, source="the push")
            if not isinstance(values, dict):
                raise session_data.DataError("the pushed values are not a dict")
            self.namespace.update(values)
        except Exception as error:
            print(f"nbworkers: a push was refused: {type(error).__name__}: {error}", file=sys.stderr, flush=True)

    def _reply_frames(self, command: dict, fields: dict, blobs: list, size: int) -> list:
        """A pull reply: its blobs in the shared-memory file the kernel named when they are large enough (local
        sessions), else as frames (also when the file cannot be written)."""
        path, threshold = command.get("shm_path"), command.get("shm_min_bytes")
        if path and isinstance(threshold, int) and size >= threshold:
            try:
                target, prefix = session_shm.offered(path), os.path.basename(path).split("-")[0]
                if self._shm is None or (self._shm.folder, self._shm.prefix) != (target.parent, prefix):
                    self._shm = session_shm.ShmFiles(target.parent, prefix)  # the kernel's: its sweeps see ours
                self._shm.write(target, blobs)
                return session_data.pack_offer(self.signer, "pull", fields, [memoryview(b).nbytes for b in blobs])
            except (OSError, ValueError) as error:
                print(f"nbworkers: pull by shared memory failed ({error}); sending it over the socket",
                      file=sys.stderr, flush=True)
        return session_data.pack(self.key, self.signer, "pull", fields, blobs)

    def _data_socket(self, address: str):
        """A PUSH socket to the kernel's data socket, connected on the first pull (CurveZMQ on ``--backend ray``)."""
        if self._data is None or self._data[0] != address:
            import zmq

            if self._data is not None:
                self._data[1].close(linger=0)
            socket: Any = zmq.Context.instance().socket(zmq.PUSH)
            socket.setsockopt(zmq.LINGER, 0)
            curve = session_wire.client_curve(os.environ)
            if curve is not None:
                socket.curve_serverkey, socket.curve_publickey, socket.curve_secretkey = (
                    k.encode("ascii") for k in curve)
            socket.connect(address)
            self._data = (address, socket)
        return self._data[1]

    def _send(self, kind: str, **fields) -> None:
        if self.sender is not None:
            self.sender.send(kind, **fields)


def _hook_reports(worker: SessionWorker) -> None:
    """Make every report (``Reporter.report``: distlib.fit's and ReportCallback's steps, ``distlib.report``) a
    point where a Stop can end the cell on every worker at the same step."""
    original = reporting.Reporter.report

    def report(self, fields, force=False):
        worker.step_point()  # a Stop raises here: this step's report is not sent, the previous one is the last
        if isinstance(fields.get("step"), int):
            worker.last_step = fields["step"]
        return original(self, fields, force)

    reporting.Reporter.report = report  # type: ignore[method-assign]  # every report is a step point


def _put_back_saved_values(worker: SessionWorker) -> None:
    """New processes right after a save (the kernel restarted them after an error): this worker's arrays and JSON
    values come back by themselves; models, optimizers and variables when a cell builds them again
    (``saved_state/rebuild.py``), or with ``%workers restore``."""
    run_dir = env_settings.RUN_DIR.get()
    if not run_dir or worker.gen < 1:
        return
    from nbworkers.distlib.saved_state import namespace as session_state

    try:
        session_state.restore_values_after_restart(worker.namespace, run_dir, worker.gen, worker.index)
        worker.rebuilds = RestoreOnRebuild(worker.namespace, run_dir, worker.gen)
    except Exception:
        print("nbworkers: the values saved before the restart could not be put back:", file=sys.stderr)
        traceback.print_exc()


def main(module: types.ModuleType) -> int:
    """Serve cells until the kernel says ``shutdown`` (or the host stops this process)."""
    worker = SessionWorker(module)
    _put_back_saved_values(worker)
    install_rich_output(worker.rich)
    _hook_reports(worker)
    thread = threading.Thread(target=worker.listen, args=(os.environ[session_wire.ENV_COMMANDS],),
                              name="nbworkers-session-commands", daemon=True)
    thread.start()
    return worker.serve()
