"""An interactive session (``%%worker -n 2 --session NAME``): a cluster whose workers stay alive and run cell
after cell in their own persistent namespaces (``distlib/worker/session.py``).

``Session`` is the user's handle: a ``Cluster`` (the handle over its run loop: same launch, relay, restart
policy, watchdog, stop) that it holds, not is, and its part in that loop, a ``SessionParticipant``
(``magics/sessions/participant.py``: the command socket, the ``SessionCell``s, the session core). Every decision
about cells is the session core's (``magics/sessions/core/cells.py``: events in, actions out); the participant turns
relay messages, Stop clicks and the loop's rounds into its events and carries out its actions. Cells run one at a
time, in order (as IPython's execution queue); a failed cell cancels the queued ones.

- One worker's error: the others get ``session_peer_grace`` seconds to end the cell too (an error in code
  every worker runs ends everywhere); then their collectives are aborted (``abort``). A worker whose
  collectives were aborted cannot use them again, so the session restarts its processes and says which
  cells' state is gone. No end within ``session_abort_grace`` after the abort: the same restart.
- Stop (``interrupt``): KeyboardInterrupt in the cell on every worker; the session stays usable. A cell
  still running ``session_interrupt_grace`` seconds later (stuck in a collective), or a second Stop,
  restarts the processes (state gone).
- A worker killed, or Restart: the group restarts as any cluster does (restart policy), once the workers still
  alive saved what they hold (the supervisor holds the restart: magics/run/core/save_hold.py).
- Rich output: a worker's ``display`` message (a MIME bundle, ``protocol/mime.py``) goes to the running cell
  (``SessionCell.outputs``, its last expression to ``SessionCell.results``) when it passes the checks and limits
  (``display_max_bytes``, ``display_max_outputs``); else it is dropped and counted.
- ``pull(expression, worker)`` (``magics/sessions/pull.py``): the value of an expression in a worker's namespace,
  as JSON and ``.npy`` only, on the session's data socket (``data.py``); ``push(name=value)`` and
  ``scatter(name, array)`` (``push.py``) the other way, on the command socket. Both run after the cells submitted
  before them and move arrays as raw frames (``protocol/session_data.py``).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.run.cluster import Cluster
from nbworkers.magics.run.core.state import ClusterState
from nbworkers.magics.run.relay import RelayReceiver
from nbworkers.magics.sessions.cell import SessionCell
from nbworkers.magics.sessions.channel import CommandChannel
from nbworkers.magics.sessions.core.records import RESTORE_LABEL
from nbworkers.magics.sessions.core.saved_state import SavedState
from nbworkers.magics.sessions.data import DataChannel
from nbworkers.magics.sessions.participant import SessionParticipant
from nbworkers.magics.sessions.pull import PullRequest
from nbworkers.magics.settings import WorkerSettings
from nbworkers.magics.shapes import Backend, ClusterSnapshot, View
from nbworkers.protocol import session_data

RESTORE_CELL = ("__import__('nbworkers.distlib.saved_state.namespace', fromlist=['restore_session_state'])"
                ".restore_session_state()\nNone")  # the line's value is shown in the log, not as the cell's Out


class SessionEnded(RuntimeError):
    """The session is stopped (or failed): start it again with ``%%worker -n N --session NAME``."""


class NothingToRestore(RuntimeError):
    """``restore()`` of a session whose workers saved nothing."""


class Session:
    def __init__(self, spec: LaunchSpec, config: WorkerSettings | None = None, backend: Backend | None = None,
                 view_factory: Callable[[Cluster], View] | None = None):
        self._part = SessionParticipant(self)
        self.cluster = Cluster(spec, config, backend, view_factory, participants=(self._part,))

    # ------------------------------------------------------------------------------ the run (its Cluster handle)
    # What a user calls on a cluster (docs/reference/python-api.md: status, done, snapshot, stop, restart, resize,
    # logs, show), what ``%workers`` asks of any handle, and what the session's own parts read (its cells, pull, push,
    # views: state, settings, backend, lock, ending). The rest is ``session.cluster``'s.
    @property
    def name(self) -> str:
        return self.cluster.name

    @property
    def settings(self) -> WorkerSettings:
        return self.cluster.settings

    @property
    def backend(self) -> Backend:
        return self.cluster.backend

    @property
    def run_dir(self) -> Any:
        return self.cluster.run_dir

    @property
    def state(self) -> ClusterState:
        return self.cluster.state

    @property
    def relay(self) -> RelayReceiver:
        return self.cluster.relay

    @property
    def status(self) -> str:
        return self.cluster.status

    @property
    def done(self) -> bool:
        return self.cluster.done

    @property
    def stop_requested(self) -> bool:
        return self.cluster.stop_requested

    @property
    def ending(self) -> bool:
        """Its supervisor is stopping it, or it ended: it takes no new cell, pull or push."""
        return self.cluster.ending

    @property
    def lock(self) -> threading.RLock:
        """The run loop's lock: it guards the session's cells and core (its cells take it too)."""
        return self.cluster.lock

    def start(self) -> "Session":
        self.cluster.start()
        return self

    def snapshot(self) -> ClusterSnapshot:
        """The run's one snapshot, the session's part included (``session``: its cells)."""
        return self.cluster.snapshot()

    def stop(self) -> None:
        self.cluster.stop()

    def restart(self) -> None:
        """Restart the processes (their state is lost, but for what the workers still alive save first); a session
        that ended starts again, empty."""
        self.cluster.restart()

    def resize(self) -> str:
        return self.cluster.resize()

    def logs(self, worker: int | None = None, tail: int | None = None) -> str:
        return self.cluster.logs(worker, tail)

    def check_index(self, worker: int) -> int:
        return self.cluster.check_index(worker)

    def show(self) -> View:
        return self.cluster.show()

    def _ipython_display_(self) -> None:
        self.show()

    # ------------------------------------------------------------------------------ user-facing
    @property
    def cells(self) -> list[SessionCell]:
        """Every cell submitted to this run of the session, in order, a `%workers restore` too (``cells[N - 1]`` is
        the Nth submitted; ``cell.label`` is what the views call it: "cell 3", "restore")."""
        return self._part.cells

    @property
    def channel(self) -> CommandChannel:
        """The session's command socket (bound at its first launch)."""
        assert self._part.channel is not None, f"session {self.name!r} was not started"
        return self._part.channel

    @property
    def data_channel(self) -> DataChannel:
        """The socket pull replies arrive on (bound with the command socket)."""
        assert self._part.data is not None, f"session {self.name!r} was not started"
        return self._part.data

    @property
    def lost_note(self) -> str:
        """What the last restart of the processes lost."""
        return self._part.core.lost_note

    @property
    def saved(self) -> SavedState | None:
        """What the workers saved before the processes last restarted (``restore()`` puts it back); None: nothing."""
        return self._part.core.saved

    def submit(self, code: str, timeout: float | None = None, display: str = "0", label: str = "",
               prompt: int | None = None) -> SessionCell:
        """Queue a cell; it runs once the cells before it have ended (returns at once). ``display``: whose rich
        output (``display(...)``, ``plt.show()``) the cell shows, worker 0's (``"0"``) or every worker's (``"all"``).
        ``prompt``: the notebook's execution count of the cell that submits it (messages then call it "cell [5]", as
        the notebook shows it; without it "cell 3", the session's own count)."""
        with self.lock:
            if self.ending:
                raise SessionEnded(f"session {self.name!r} is {self.status}: `%%worker -n N --session {self.name}` "
                                   "starts it again (its variables are gone)")
            return self._part.submit(code, timeout, display, label, prompt)

    @property
    def user_cells(self) -> int:
        """How many cells the user ran in this session (a ``%workers restore`` is not one of them)."""
        return self._part.core.user_cells

    def live_cells(self) -> str:
        """The cells whose state the current processes hold ("cells 1-8"): what a restart loses."""
        return self._part.core.live_cells()

    @property
    def restarts(self) -> int:
        """How many times the session's processes were started again (each time their state was lost)."""
        return self.state.restarts

    @property
    def busy(self) -> bool:
        with self.lock:
            return self._part.core.busy

    def interrupt(self, cell: SessionCell | None = None) -> str:
        """Stop the running cell (KeyboardInterrupt on every worker); a queued ``cell`` is cancelled instead.
        A second Stop of the same cell restarts the processes. Returns what was done (``InterruptOutcome``)."""
        with self.lock:
            return self._part.interrupt(cell.number if cell else None).value

    def stop_cell(self) -> str:
        return self.interrupt()

    def ready(self, worker: int) -> bool:
        """Whether ``worker`` can take a command now: connected, and no restart under way (lock held)."""
        return not self.cluster.restart_pending and worker in self.channel.ready_workers()

    @property
    def pending_pulls(self) -> dict[str, PullRequest]:
        """The pulls waiting for their reply, by request id (``pull.py`` adds and removes them, lock held)."""
        return self._part.pulls

    def unpack_reply(self, frames: list[Any], open_shm: session_data.Opener | None = None
                     ) -> tuple[str, dict[str, Any], list[Any]]:
        """A data-socket message checked against the session's key and ``pull_max_bytes`` (``DataError`` if not);
        ``open_shm``: how a local session's shared-memory reply is mapped (``DataChannel.open_reply``)."""
        return session_data.unpack(frames, self._part.key, self.settings.pull_max_bytes, open_shm)

    def restore(self) -> SessionCell:
        """Queue a cell that puts back what the workers saved before the processes last restarted
        (``distlib/saved_state/namespace.py``: ``restore_session_state()`` on every worker): run the cells that
        build the saved models and variables first. ``NothingToRestore`` when nothing was saved, ``SessionEnded``
        once the session is stopped."""
        if self.saved is None:
            raise NothingToRestore(f"session {self.name!r} saved nothing to restore: it saves its models, variables "
                                   "and values only when its processes restart after one worker's error.")
        return self.submit(RESTORE_CELL, label=RESTORE_LABEL)

    def pull(self, expression: str, worker: int = 0, timeout: float | None = None) -> Any:
        """The value of ``expression`` in ``worker``'s namespace, after the cells submitted before this call:
        numbers, strings, None, lists, dicts, numpy arrays (tensors come back as arrays), a History's dict.
        Raises ``PullError`` when the expression raises, the value cannot travel, or the reply is refused."""
        from nbworkers.magics.sessions.pull import pull

        return pull(self, expression, worker, timeout)

    def push(self, workers: list[int] | None = None, allow_pickle: bool = False, **values: Any) -> list[int]:
        """Assign each ``name=value`` in the namespaces of ``workers`` (default: every worker), after the cells
        submitted before this call: numbers, strings, None, lists, dicts, numpy arrays (as ``.npy``). Other
        objects only with ``allow_pickle=True`` (pickled here, unpickled in the workers). Returns the workers.
        Raises ``PushError`` (a ``PullError``) when a value cannot travel or a worker cannot be reached."""
        from nbworkers.magics.sessions.push import push

        return push(self, values, workers, allow_pickle)

    def scatter(self, name: str, array: Any, workers: list[int] | None = None) -> list[tuple[int, int]]:
        """Give each of ``workers`` (default: all) its shard of ``array`` along axis 0 as ``name`` (as
        ipyparallel's scatter: ``numpy.array_split``). Returns each worker's (start, stop) rows."""
        from nbworkers.magics.sessions.push import scatter

        return scatter(self, name, array, workers)

    def last_pending_cell(self) -> SessionCell | None:
        """The cell a call made now runs after (the last queued, else the running one); None: idle."""
        with self.lock:
            number = self._part.core.last_pending
            return self.cells[number - 1] if number else None

    def wait(self, timeout: float | None = None, raise_on_failure: bool = True, echo: Any = None,
             **kwargs: Any) -> bool:
        """Wait for the last submitted cell (``RunFailed`` if it failed); once stopping, for the session's end."""
        with self.lock:
            last = self.cells[-1] if self.cells else None
            ending = self.cluster.stopping
        if ending or last is None:
            return self.cluster.wait(timeout, echo=echo, **kwargs)
        return last.wait(timeout, raise_on_failure=raise_on_failure, echo=echo)

    def __repr__(self) -> str:
        with self.lock:
            busy, count = self._part.core.busy, len(self.cells)
        return (f"<Session {self.name!r}: {len(self.state.workers)} workers, {self.status}, {count} cells, "
                f"{'busy' if busy else 'idle'}>")
