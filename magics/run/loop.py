"""The run loop: one ``%%worker`` run's heart, apart from the user's handle over it (``cluster.py``).

It owns the relay, the worker group, the supervisor core, the capacity looks and the state file, and it works
through one queue: an event (a relay message translated once, the processes' exits, a stop or restart request, a
capacity look, the clock) goes to the supervisor core, the loop carries out the actions it returns, and what they
bring about (a launch that failed) is the next event in the queue. So no core calls another, and no action is
carried out from inside another's handler. Participants (``Participant``, as Ray's controller carries its
callbacks; a plain run has none, a session is one: magics/sessions/participant.py) get their hooks at fixed points
of each round, those marked "lock held" under the loop's lock, and a port into the run (``port.py``: its facts, how it
is now, post, changed, dropped), never the loop: what a participant needs of the run it posts to the queue, and so do
the events of its own core (``take``), so that one queue orders both. Modelled on Ray Train v2's
``TrainController`` (its ``_step``, its callbacks injected, its worker group composed, nothing inherited).

No IPython and no views here: the handle refreshes its views from ``after_round`` and ``after_end``, so the loop
can later run outside the kernel (``--detach``). Every status change, failure decision and restart is the core's
(magics/run/core/supervisor.py, its policy magics/run/core/restart_policy.py). Launching the group is
group_launch.py, reaching its processes worker_group.py.
"""

from __future__ import annotations

import os
import pickle
import shutil
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol, assert_never, get_args

from nbworkers.magics.backends.isolation import isolation_fact
from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch import roles
from nbworkers.magics.launch.environment import cpp_log_level
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.run.capacity import CapacityLooks, elastic_start
from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.core.restart_policy import RestartPolicy
from nbworkers.magics.run.core.supervisor import Supervisor
from nbworkers.magics.run.core.timings import Timings
from nbworkers.magics.run.group_launch import initial_state, launch_group, new_worker_state
from nbworkers.magics.run.messages import Relayed, Translator
from nbworkers.magics.run.noise import noise_level
from nbworkers.magics.run.outputs import state_file_data
from nbworkers.magics.run.port import RunFacts, RunNow, RunPort
from nbworkers.magics.run.relay import Message, RelayReceiver
from nbworkers.magics.run.worker_group import WorkerGroup
from nbworkers.magics.rundir import layout as rundir
from nbworkers.magics.rundir.prepare import prepare_run_dir
from nbworkers.magics.settings import WorkerSettings
from nbworkers.magics.shapes import Backend, ClusterSnapshot
from nbworkers.procs.ownership import new_run_id
from nbworkers.protocol import cell_scan, wire
from nbworkers.protocol.private.files import sign_push
from nbworkers.protocol.relay_curve import CurveServer

RUN_EVENTS = get_args(ev.Event)  # the run core's; a participant posts its own core's too (``RunPort.post``)


class Participant(Protocol):
    def begin_run(self, port: RunPort) -> None:
        """A new run of the loop (its first, or the Restart of a run that ended): start afresh; ``port``: the run."""

    def before_launch(self, hosts: tuple[str, str | None], curve: CurveServer | None) -> dict[str, str]:
        """The group is about to be launched (again, on a restart): its sockets ready for the new generation, bound
        where the relay is (``hosts``: bind, advertise), encrypted as it is (``curve``); the environment it adds to
        every worker's."""

    def take(self, event: object) -> None:
        """An event the participant posted for its own core (``RunPort.post``), in the loop's queue order (lock
        held)."""

    def relayed(self, event: ev.Event | Relayed) -> None:
        """A relay message of the current generation as an event (``messages.py``: the run core's, which it gets
        next, or a cell's), lock held."""

    def tick(self) -> None:
        """Once a round (lock held): the participant's sockets and timers."""

    def idle(self) -> bool:
        """True while silence is expected (an idle session): the stall watchdog does not count it (lock held)."""

    def on_run_action(self, action: ev.Action) -> None:
        """What the run core decided (lock held), after the loop carried it out: a restart, a failure."""

    def after_round(self) -> None:
        """Once a round, outside the lock: its views, its waiters."""

    def snapshot_part(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """The run's snapshot with the participant's part (lock held): the views, state.json and the REST API read
        this one snapshot."""

    def drop_counts(self, counts: dict[str, int]) -> None:
        """Its own drop counts into the run's (lock held)."""

    def run_ended(self) -> None:
        """The loop ended (outside the lock): end what waits on it, close its sockets."""

    def launch_failed(self) -> None:
        """``start()`` failed before the loop ran: close its sockets."""


class RunLoop:
    def __init__(self, spec: LaunchSpec, settings: WorkerSettings, backend: Backend, lock: threading.RLock,
                 participants: Sequence[Participant] = (), after_round: Callable[[], None] = lambda: None,
                 after_end: Callable[[], None] = lambda: None):
        self.spec, self.name, self.settings, self.backend, self.lock = spec, spec.name, settings, backend, lock
        self.run_dir = rundir.path_for(self.name, settings.run_root)
        self.participants = tuple(participants)
        self._after_round, self._after_end = after_round, after_end  # the handle's: its views
        self.done = threading.Event()
        self.stop_event = threading.Event()
        self.restart_event = threading.Event()
        self.dirty = True  # something the views show changed since they were last refreshed
        self.detached = False  # run by its own supervisor process, outside the kernel (detached.py)
        self.push_pickle: bytes | None = None  # detached: --push as the kernel pickled it (values of its classes)
        self.key = wire.new_key()
        self.run_id = new_run_id()  # NBWORKERS_RUN_ID of every process of this run (ownership.py)
        self._queue: deque[ev.Event | tuple[Participant, object]] = deque()  # a participant's: (it, its event)
        self._draining = False
        self._last_state_write = 0.0
        self._looks = CapacityLooks(backend, settings.elastic_check_interval)  # elastic runs
        self._worker_group = WorkerGroup()  # the processes of the current attempt (worker_group.py)
        self._relay: RelayReceiver | None = None
        self._thread: threading.Thread | None = None
        # roles (--chief, --evaluator, --ps N): magics/launch/roles.py; unawaited tasks end with the run (supervisor.py)
        elastic, capacity = elastic_start(spec, backend)  # --min-workers: as many as the cluster can place
        tasks = roles.plan(elastic.size_for(capacity) if elastic else spec.workers, chief=spec.chief,
                           evaluator=spec.evaluator, ps=spec.ps, cell=spec.code, names=cell_scan.of_spec(spec).names)
        self.state = initial_state(self.name, backend.name, self.run_dir, tasks, settings)
        # relay messages as events, C++ chatter filtered out (magics/run/noise.py): messages.py
        self._messages = Translator(noise_level(cpp_log_level(os.environ, spec.env)), len(self.state.workers))
        self.core = Supervisor(
            self.state, RestartPolicy.from_settings(settings, spec.max_restarts),
            Timings.from_settings(settings, spec.stall_timeout, spec.timeout), tasks,
            clock=time.monotonic, wall=time.time, elastic=elastic,
            new_worker=lambda i: new_worker_state(self.run_dir, settings, i),
        )
        if elastic is not None:
            self.state.elastic = {"min": elastic.min, "max": elastic.max}
            self.core.handle(ev.CapacitySeen(capacity))
        for participant in self.participants:
            participant.begin_run(_Port(self, participant))

    # ----------------------------------------------------------------------------------- what others ask
    @property
    def relay(self) -> RelayReceiver:
        """The run's relay (from ``start()`` on)."""
        assert self._relay is not None, f"run {self.name!r} was not started"
        return self._relay

    @property
    def ending(self) -> bool:
        """Stopping or ended: no new work for it (lock held)."""
        return self.done.is_set() or self.core.stopping

    def snapshot(self) -> ClusterSnapshot:
        """The one picture of the run (lock held): the state's, the drop counts, every participant's part."""
        data = self.state.snapshot(time.time())
        counts = self._relay.drops.counts() if self._relay else {}
        for participant in self.participants:
            participant.drop_counts(counts)
        data["dropped"] = counts
        data["isolation"] = isolation_fact(self.backend)  # namespace, or off and why (backends/isolation.py)
        for participant in self.participants:
            data = participant.snapshot_part(data)
        return data

    def stop(self) -> None:
        """Ask for the run's stop (any thread, a signal handler too): the loop takes it at its next round."""
        self.stop_event.set()

    def wait_done(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the run's end; whether it ended."""
        return self.done.wait(timeout)

    def ask_capacity(self) -> bool:
        """``%workers resize``: a look at the cluster's room now, answered by the loop's next round."""
        return self._looks.ask(self.settings.stop_grace)

    def post(self, event: ev.Event | tuple[Participant, object]) -> None:
        """Give the run core an event, or a participant its own core's ((participant, event)), lock held. Handled
        after the event being handled, if any: one queue."""
        self._queue.append(event)
        if self._draining:
            return
        self._draining = True
        try:
            while self._queue:
                item = self._queue.popleft()
                if isinstance(item, tuple):
                    item[0].take(item[1])
                else:
                    self._step(item)
        finally:
            self._draining = False

    # ----------------------------------------------------------------------------------- launch
    def start(self) -> None:
        # never another kernel's live run; a 0700 directory, 0600 files (rundir/prepare.py)
        pickled = self.push_pickle if self.push_pickle is not None else pickle.dumps(self.spec.push)
        push = sign_push(self.key, pickled) if self.spec.push else None  # checked by workers
        prepare_run_dir(self.run_dir, "\n" + self.spec.code, push,  # line 1: the %%worker line
                        [rundir.log_path(self.run_dir, i) for i in range(len(self.core.tasks))])
        self._relay = RelayReceiver(self.key, *self.backend.relay_hosts(),  # ray: the nodes' address, CurveZMQ
                                    curve=self.backend.encrypt_relay)
        self.backend.attach_relay(self._relay)
        try:
            self._launch_group()
        except BaseException as error:
            self._worker_group.kill()
            self._relay.close()
            self.backend.close()
            for participant in self.participants:
                participant.launch_failed()
            if isinstance(error, LaunchError):  # refused before anything ran: leave no trace
                shutil.rmtree(self.run_dir, ignore_errors=True)
            raise
        self.write_state()
        self._thread = threading.Thread(target=self._run, name=f"nbworkers-{self.name}", daemon=True)
        self._thread.start()

    def _launch_group(self) -> None:
        # each worker's address, GPUs, TF_CONFIG and environment: group_launch.py
        extra_env: dict[str, str] = {}
        for participant in self.participants:
            extra_env.update(participant.before_launch(self.backend.relay_hosts(), self.relay.curve))
        self._worker_group = WorkerGroup()
        launch_group(self._worker_group.handles, backend=self.backend, spec=self.spec, settings=self.settings,
                     tasks=self.core.tasks, run_dir=self.run_dir, generation=self.state.generation, relay=self.relay,
                     key=self.key, run_id=self.run_id, extra_env=extra_env)

    # ----------------------------------------------------------------------------------- the loop
    def _run(self) -> None:
        try:
            while True:
                messages = self.relay.poll(self.settings.poll_interval)
                with self.lock:
                    for message in messages:
                        self._take(message)
                    self._check_requests()
                    for participant in self.participants:
                        participant.tick()
                    self._check_processes()
                self._looks.look(self.core, self.post, self.lock)  # an elastic run's look, when due (capacity.py)
                with self.lock:
                    self.post(ev.Tick(idle=all(p.idle() for p in self.participants) if self.participants else False))
                    ended = self.core.ended
                if ended:
                    break
                self._round()
            self._drain_relay()
            with self.lock:
                self.post(ev.Ended())
        except Exception:
            with self.lock:
                self.post(ev.SupervisorCrashed(traceback.format_exc()))
        finally:
            self.write_state()
            # released before the run says it is done: a restart() of the ended run (the same backend) may follow
            if self._relay is not None:
                self._relay.close()
            self._worker_group.close()
            self.backend.close()
            for participant in self.participants:
                participant.run_ended()
            self.done.set()
            self._after_end()

    def _step(self, event: ev.Event) -> None:
        """One event to the core, its actions carried out in order; the participants hear of each (lock held)."""
        actions = self.core.handle(event)
        if actions or not isinstance(event, (ev.Tick, ev.Progress)):  # the others change what views show
            self.dirty = True
        for action in actions:
            match action:
                case ev.StopGroup():
                    self._worker_group.request_stop()
                case ev.KillGroup():
                    self._worker_group.kill()
                case ev.DumpStacks():
                    self._worker_group.dump_stacks()
                case ev.RetireWorker():
                    self._worker_group.retire(action.index)
                case ev.Relaunch():
                    self._relaunch()
                case ev.RestartScheduled() | ev.SaveBeforeRestart() | ev.Failed():
                    pass  # the participants' business (a session's cells), below
                case _:
                    assert_never(action)
            for participant in self.participants:
                participant.on_run_action(action)

    def _take(self, message: Message) -> None:
        """A relay message, translated once (messages.py): each event to the participants first, then the run core's
        to the core."""
        events, dropped = self._messages.events(message, self.state.generation, self._worker_group.node_label)
        if dropped:
            self.relay.drops.note(*dropped)
            return
        self.dirty = True
        for event in events:
            for participant in self.participants:
                participant.relayed(event)
            if isinstance(event, RUN_EVENTS):
                self.post(event)
            if isinstance(event, ev.Hello):
                self._worker_group.note_worker(event.worker, event.pid)

    def _check_requests(self) -> None:
        """Stop and restart requests (any thread, or the server extension's request files) to the core."""
        if self.core.stopping:
            return
        if self.stop_event.is_set() or rundir.stop_requested(self.run_dir):
            self.post(ev.StopRequested())
        elif self.restart_event.is_set() or rundir.take_restart_request(self.run_dir):
            self.restart_event.clear()
            self.post(ev.RestartRequested())

    def _check_processes(self) -> None:
        exits = self._worker_group.exits([w.index for w in self.state.workers if w.exit_code is None])
        if exits:
            self.post(ev.Exited(tuple(exits)))

    def _relaunch(self) -> None:
        """The group again, on fresh ports (the core has started a new attempt)."""
        self._worker_group.kill()
        self._worker_group.close()
        self._messages.new_generation(len(self.core.tasks))  # an elastic group may have changed size (the core's)
        try:
            self._launch_group()
        except LaunchError as error:  # e.g. a lost node leaves too few for the group
            self._worker_group.kill()
            # queued: handled once this action is carried out; the workers after the last handle have no process
            self.post(ev.LaunchFailed(str(error), launched=len(self._worker_group.handles)))
        self.dirty = True

    def _drain_relay(self) -> None:
        """The hosts send their last log lines and exit codes just before they exit: take them in."""
        deadline = time.monotonic() + self.settings.relay_drain_time
        while time.monotonic() < deadline:
            messages = self.relay.poll(self.settings.relay_drain_poll)
            with self.lock:
                for message in messages:
                    self._take(message)
            if not messages:
                break

    # ----------------------------------------------------------------------------------- outputs
    def _round(self) -> None:
        for participant in self.participants:
            participant.after_round()
        if time.monotonic() - self._last_state_write >= self.settings.state_file_interval:
            self.write_state()
        self._after_round()

    def write_state(self) -> None:
        """``state.json`` from the one snapshot (atomic, 0600): the REST API and the sidebar read it."""
        self._last_state_write = time.monotonic()
        with self.lock:
            data = state_file_data(self.snapshot(), self._worker_group.handles, self.run_id)
        if self.state.cell_id or self.state.notebook:  # the cell the sidebar runs again after a kernel restart
            data["cell_id"], data["notebook"] = self.state.cell_id, self.state.notebook
        if self.detached:  # its kernel_pid is the supervisor process's (liveness.py)
            data["detached"] = True
        try:
            rundir.write_state(self.run_dir, data)
        except OSError:
            pass


class _Port:
    """A participant's port into its run (``port.RunPort``): what it may read and say, not the loop."""

    __slots__ = ("_loop", "_participant", "facts")

    def __init__(self, loop: RunLoop, participant: Participant):
        self._loop, self._participant = loop, participant
        self.facts = RunFacts(loop.name, loop.key, loop.settings, loop.lock)

    def now(self) -> RunNow:
        loop = self._loop
        state = loop.state
        return RunNow(state.generation, len(state.workers), loop.ending, loop.core.restart_pending, state.status,
                      state.error)

    def post(self, event: object) -> None:
        if isinstance(event, RUN_EVENTS):
            self._loop.post(event)
        else:
            self._loop.post((self._participant, event))

    def changed(self) -> None:
        self._loop.dirty = True

    def dropped(self, what: str, detail: str) -> None:
        self._loop.relay.drops.note(what, detail)
