"""The supervisor's decisions, as a state machine: ``Supervisor.handle(event) -> [action]``.

No threads, processes, sockets or TensorFlow in here: ``Cluster`` (magics/run/cluster.py) polls the relay and the
processes, turns what it saw into events (``events.py``), hands them to ``handle`` and executes the actions it
gets back (stop, kill, dump stacks, retire one task, relaunch). Time comes from two injected clocks (``clock``
for timeouts, ``wall`` for the times written into the state), never from the machine's, so the whole lifecycle
(start, progress, failures, restarts and their back-off, the stall watchdog, stop, the end) is unit-tested in
milliseconds (tests/unit/test_run_core_*.py). ``handle`` matches on the ``Event`` union and the shell on the
``Action`` union, both ending in ``assert_never``: mypy proves every case is handled.

It owns every status change of the run (``ClusterState.status``) and of its workers (``WorkerState.status``),
and every other change of the state (log tails, metrics, pids, the restart bookkeeping, the end). Views are the
shell's business: it refreshes them after any event but a ``Tick`` or ``Progress`` that returned no action (those
leave what a view shows as it was). Whether a failure is restarted is the policy's
(magics/run/core/restart_policy.py); each launch of the group is an ``Attempt``. Statuses are named by
``ClusterStatus``/``WorkerStatus`` (protocol/statuses.py) and stored as their plain string values, so a
snapshot is plain data (JSON, ``repr``) everywhere it goes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_never

from nbworkers.magics.launch import roles
from nbworkers.magics.launch.tfconfig import Task
from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.core import retirement, watchdog
from nbworkers.magics.run.core.elastic import Elastic, growth
from nbworkers.magics.run.core.events import Attempt
from nbworkers.magics.run.core.failures import (
    CapacityReturned,
    GroupStalled,
    NodeLost,
    RelaunchFailed,
    RunTimedOut,
    TooFewWorkers,
    UserRestart,
    WorkerCrashed,
    WorkerFailure,
    classify_exit,
    root_cause,
)
from nbworkers.magics.run.core.restart_policy import RestartPolicy
from nbworkers.magics.run.core.save_hold import SaveHold
from nbworkers.magics.run.core.state import ClusterState, WorkerState
from nbworkers.magics.run.core.timings import Timings
from nbworkers.protocol.statuses import ClusterStatus, WorkerStatus


class Supervisor:
    """``elastic``: the bounds of an elastic group (``--min-workers``; None: a fixed size), with ``new_worker``
    making the state of a worker a bigger group adds (magics/run/core/elastic.py)."""

    def __init__(self, state: ClusterState, policy: RestartPolicy, timings: Timings, tasks: list[Task] | None = None,
                 *, clock: Callable[[], float], wall: Callable[[], float], elastic: Elastic | None = None,
                 new_worker: Callable[[int], WorkerState] = WorkerState):
        self.state = state
        self.policy = policy
        self.timings = timings
        self.tasks = tasks if tasks is not None else roles.plan(len(state.workers))
        self.clock = clock  # seconds, monotonic: timeouts, deadlines, the watchdog (the shell's time.monotonic)
        self.wall = wall  # seconds since the epoch: the times written into the state (restart history, end)
        self.started = clock()
        self.attempt = Attempt(state.generation, None, self.started, self.started)
        self.stopping_since: float | None = None
        self.final_status = ClusterStatus.STOPPED  # what the stop under way ends in (``stopping``)
        self.kill_deadline: float | None = None
        self.pending: WorkerFailure | None = None  # a restart is due once the group is gone
        self.restart_due = 0.0
        self.restart_stop_at = 0.0  # clock: when the group was stopped for the pending restart
        self.elastic = elastic
        self.new_worker = new_worker
        self.capacity: int | None = None  # elastic: workers the cluster could place at the last look
        self.resize_note = ""  # elastic: the answer to the last %workers resize
        self.hold = SaveHold()  # a session saves before a restart stops the group (save_hold.py)

    # ------------------------------------------------------------------------------------- queries
    @property
    def stopping(self) -> bool:
        return self.stopping_since is not None

    @property
    def restart_pending(self) -> bool:
        return self.pending is not None

    @property
    def all_exited(self) -> bool:
        """Every worker's process has exited, or it has none (its launch failed)."""
        return all(w.exit_code is not None or w.index in self.attempt.unlaunched for w in self.state.workers)

    @property
    def relaunch_due(self) -> bool:
        """A restart's launch is due at the next ``Tick`` (an elastic shell looks at the capacity first)."""
        return self.all_exited and self.pending is not None and self.clock() >= self.restart_due

    @property
    def ended(self) -> bool:
        """Every process is gone and no restart is due: the shell drains the relay and sends ``Ended``."""
        return self.all_exited and self.pending is None

    # ------------------------------------------------------------------------------------- events
    def handle(self, event: ev.Event) -> list[ev.Action]:
        """Apply one event (magics/run/core/events.py); the actions the cluster must carry out, in order.

        The match covers the whole ``Event`` union (``assert_never``): an event without a case fails mypy."""
        match event:
            case ev.Progress():
                self.attempt.last_progress = self.clock()
                return []
            case ev.Logged():
                self._on_logged(event)
                return []
            case ev.Hello():
                worker = self.state.workers[event.worker]
                worker.pid, worker.host = event.pid, event.host
                return []
            case ev.Metrics():
                self._on_metrics(event)
                return []
            case ev.StatusReported():
                self._on_status(event)
                return []
            case ev.StopRequested():
                return self._on_stop_requested()
            case ev.RestartRequested():
                return self._on_restart_requested(event)
            case ev.Exited():
                return self._on_exited(event)
            case ev.Tick():
                return self._on_tick(event)
            case ev.CapacitySeen():
                return self._on_capacity(event)
            case ev.CapacityUnknown():
                self.resize_note = f"the cluster did not answer ({event.why})"
                return []
            case ev.LaunchFailed():
                return self._on_launch_failed(event)
            case ev.Ended():
                return self._on_ended()
            case ev.SupervisorCrashed():
                return self._on_crashed(event)
            case ev.HoldRestarts():
                self.hold.wait = event.wait
                return []
            case ev.SaveEnded():
                return self._end_hold()
            case _:
                assert_never(event)

    def _on_launch_failed(self, event: ev.LaunchFailed) -> list[ev.Action]:
        """The workers the failed launch did not start have no process to wait for: the run can end."""
        for worker in self.state.workers[event.launched:]:
            if worker.exit_code is None:
                self.attempt.unlaunched.add(worker.index)
                worker.status, worker.detail = WorkerStatus.FAILED, "not started: the group's launch failed"
        return self._fail(RelaunchFailed(f"the group could not be started again: {event.error}"))

    def _on_logged(self, event: ev.Logged) -> None:
        self.attempt.last_progress = self.clock()
        worker = self.state.workers[event.worker]
        worker.log_tail.feed(list(event.lines))
        worker.log_hidden = event.hidden

    def _on_metrics(self, event: ev.Metrics) -> None:
        self.attempt.last_progress = self.clock()
        worker = self.state.workers[event.worker]
        worker.apply_metrics(event.content, self.wall())
        if worker.status in (WorkerStatus.STARTING, WorkerStatus.WAITING):
            worker.status = WorkerStatus.RUNNING
        self._note_resume(event.content)
        if self.state.status == ClusterStatus.STARTING:
            self.state.status = ClusterStatus.RUNNING

    def _on_status(self, event: ev.StatusReported) -> None:
        self.attempt.last_progress = self.clock()
        worker = self.state.workers[event.worker]
        if worker.exit_code is None and self.pending is None:
            worker.apply_status(_worker_status(event.state), event.detail)
            started = event.state in (WorkerStatus.RUNNING, WorkerStatus.WAITING)
            if started and self.state.status == ClusterStatus.STARTING:
                self.state.status = ClusterStatus.RUNNING

    def _on_stop_requested(self) -> list[ev.Action]:
        if self.stopping:
            return []
        self.pending = None
        return self._begin_stop(ClusterStatus.STOPPED)

    def _on_restart_requested(self, event: ev.RestartRequested) -> list[ev.Action]:
        if self.stopping or self.pending is not None:
            return []
        return self._on_failure(event.cause, hold=not event.saved)

    def _on_exited(self, event: ev.Exited) -> list[ev.Action]:
        failures: list[WorkerFailure] = []
        for index, code, log_tail in event.exits:
            worker = self.state.workers[index]
            if worker.exit_code is not None:
                continue
            worker.exit_code = code
            if self.pending is not None:
                worker.status = WorkerStatus.RESTARTING
                self._amend_cause(index, code, log_tail)
            elif code == 0 or index in self.attempt.retired:  # retired: stopped by us once training ended
                worker.status = WorkerStatus.FINISHED
            elif self.stopping:
                stopped = self.final_status == ClusterStatus.STOPPED or worker.status != WorkerStatus.FAILED
                worker.status = (WorkerStatus.STOPPED if stopped else WorkerStatus.FAILED)
            else:
                worker.status = WorkerStatus.FAILED
                failures.append(classify_exit(index, code, log_tail))
                worker.detail = worker.detail or str(failures[-1])
        return self._on_failure(root_cause(failures)) if failures else []

    def _amend_cause(self, index: int, code: int, log_tail: str) -> None:
        """An exit seen after the restart was decided. A peer's loss is often noticed first: a kill -9'd worker's
        exit can reach the kernel a loop after its peer's "lost a peer" exit, and Ray declares a node dead only
        after missed health checks. A crash or a lost node seen then is the restart's cause (it explains the peer's
        failure). What our own stop did is not: SIGINT or SIGTERM, a preemption exit (42), a SIGKILL after the stop's
        grace, and anything once the user asked for the restart."""
        if not code or self.pending is None or isinstance(self.pending, UserRestart):
            return
        late = classify_exit(index, code, log_tail)
        before_our_kill = self.clock() - self.restart_stop_at < self.timings.stop_grace
        if isinstance(late, NodeLost) or (isinstance(late, WorkerCrashed) and before_our_kill):
            self.pending = root_cause([self.pending, late])

    def _on_tick(self, event: ev.Tick) -> list[ev.Action]:
        now = self.clock()
        actions: list[ev.Action] = []
        if not self.stopping and self.timings.run_timeout and now - self.started > self.timings.run_timeout:
            actions += self._fail(RunTimedOut(f"the run timed out after {self.timings.run_timeout:g} s (--timeout)"))
        if self.kill_deadline is not None and now > self.kill_deadline:
            self.kill_deadline = None
            actions.append(ev.KillGroup())
        if event.idle:  # an idle session is not stalled
            self.attempt.last_progress = now
        else:
            actions += self._check_stall(now)
        if self.hold.due(now, self.all_exited):
            actions += self._end_hold()
        if not self.all_exited:
            actions += self._retire_unawaited(now)
        elif self.pending is not None and now >= self.restart_due:
            actions += self._relaunch()
        return actions

    def _on_capacity(self, event: ev.CapacitySeen) -> list[ev.Action]:
        """An elastic group smaller than ``-n`` restarts bigger when the cluster has room again (elastic.py)."""
        self.capacity = event.workers
        current, status = len(self.state.workers), self.state.status
        busy = self.stopping or self.pending is not None or (not event.asked and status != ClusterStatus.RUNNING)
        grow, self.resize_note = growth(self.elastic, current, event.workers, "" if not busy else status)
        if grow is None:
            return []
        why = "%workers resize" if event.asked else "a look at the cluster"
        return self._on_failure(CapacityReturned(f"room for {grow} workers again ({why}): {current} -> {grow} workers"))

    def _on_ended(self) -> list[ev.Action]:
        self.state.ended = self.wall()
        if self.state.status != ClusterStatus.FAILED:
            if self.stopping:
                self.state.status = self.final_status
            elif all(w.exit_code == 0 or w.index in self.attempt.retired for w in self.state.workers):
                self.state.status = ClusterStatus.FINISHED
            else:
                self.state.status = ClusterStatus.FAILED
        return [ev.KillGroup()]

    def _on_crashed(self, event: ev.SupervisorCrashed) -> list[ev.Action]:
        self.state.status = ClusterStatus.FAILED
        self.state.error = "nbworkers supervisor crashed:\n" + event.traceback
        self.state.ended = self.state.ended or self.wall()
        return [ev.KillGroup()]

    # ------------------------------------------------------------------------------------- transitions
    def _on_failure(self, failure: WorkerFailure, hold: bool = True) -> list[ev.Action]:
        """Restart the whole group when the policy allows it, else stop it and show why (``hold``: save first)."""
        decision = self.policy.decide(failure)
        if not decision.restart:
            return self._fail(decision.failure)
        self.pending = failure
        self.restart_stop_at = self.clock()
        self.restart_due = self.clock() + decision.backoff
        self.state.status = ClusterStatus.RESTARTING
        for worker in self.state.workers:
            worker.status = WorkerStatus.RESTARTING
        if hold and self.hold.begin(self.clock()):
            alive = tuple(w.index for w in self.state.workers if w.exit_code is None)
            return [ev.SaveBeforeRestart(failure, alive)]
        return [self._stop_group(), ev.RestartScheduled(failure)]

    def _end_hold(self) -> list[ev.Action]:  # the held restart goes on: the group is stopped now
        if not self.hold.release() or self.pending is None:
            return []
        self.restart_stop_at = self.clock()
        return [self._stop_group(), ev.RestartScheduled(self.pending)]

    def _fail(self, failure: WorkerFailure) -> list[ev.Action]:
        self.pending = None  # a failed run is not restarted
        self.state.status = ClusterStatus.FAILED
        self.state.failure_kind = failure.kind
        # a short message: the worker's traceback is shown from its log tail, once (views, RunFailed)
        self.state.error = f"{str(failure).rstrip('.')}."
        return self._begin_stop(ClusterStatus.FAILED) + [ev.Failed(failure)]

    def _begin_stop(self, final_status: ClusterStatus) -> list[ev.Action]:
        self.stopping_since = self.clock()
        self.hold.release()  # a restart held for a save is not carried out
        if self.state.status != ClusterStatus.FAILED:
            stopping = ClusterStatus.STOPPING if final_status == ClusterStatus.STOPPED else final_status
            self.state.status = stopping
        self.final_status = final_status
        return [self._stop_group()]

    def _stop_group(self) -> ev.StopGroup:
        self.kill_deadline = self.clock() + self.timings.stop_grace + self.timings.kill_margin
        return ev.StopGroup()

    def _check_stall(self, now: float) -> list[ev.Action]:
        """The no-progress watchdog (``watchdog.py``): dump every worker's stacks, then restart or fail the group."""
        if self.stopping or self.pending is not None:
            return []
        seen = watchdog.look(self.timings, self.attempt, now)
        if seen is watchdog.Stall.DUMP_STACKS:
            return [ev.DumpStacks()]
        if seen is watchdog.Stall.STALLED:
            return self._on_failure(GroupStalled(watchdog.stalled_message(self.timings)))
        return []

    def _retire_unawaited(self, now: float) -> list[ev.Action]:
        """Servers and an evaluator, once training ended (``retirement.py``): stopped, each saying why."""
        if self.stopping or self.pending is not None:
            return []
        due = retirement.due(self.tasks, self.state.workers, self.attempt, now, self.timings.evaluator_grace)
        for i in due:
            self.state.workers[i].detail = roles.retirement_detail(self.tasks[i])
        return [ev.RetireWorker(i) for i in due]

    def _relaunch(self) -> list[ev.Action]:
        cause, self.pending = self.pending, None
        assert cause is not None
        state = self.state
        sizes = self._elastic_size(cause)
        if sizes is None:
            assert self.elastic is not None
            return self._fail(TooFewWorkers(
                f"{cause}; the cluster has room for {self.capacity} worker(s) now, fewer than --min-workers"
                f" {self.elastic.min}. Add nodes or free CPUs and run the cell again, or lower --min-workers",
                cause.worker, cause.log_tail))
        if sizes[0] != sizes[1]:
            state.resize(sizes[1], self.new_worker)
            self.tasks = roles.plan(sizes[1])
        state.generation += 1
        state.restarts += 1
        state.restart_causes.append(str(cause))
        state.restart_history.append({
            "generation": state.generation, "cause": str(cause), "kind": cause.kind,
            "worker": cause.worker, "time": self.wall(), "resumed_from": None,
            **({"workers": list(sizes)} if sizes[0] != sizes[1] else {}),
        })
        resized = f" ({sizes[0]} -> {sizes[1]} workers)" if sizes[0] != sizes[1] else ""
        state.status = ClusterStatus.STARTING
        for worker in state.workers:
            worker.status, worker.exit_code, worker.pid, worker.detail = WorkerStatus.STARTING, None, None, ""
            worker.restarts += 1
            worker.log_tail.feed([f"--- nbworkers: restarting the group ({cause.kind}): {cause}{resized}\n"])
        now = self.clock()
        self.attempt = Attempt(state.generation, cause, now, now)
        self.kill_deadline = None
        return [ev.Relaunch(self.attempt)]

    def _elastic_size(self, cause: WorkerFailure) -> tuple[int, int] | None:
        """(size now, size of the next launch); None: too few workers fit (elastic.py). Fixed groups keep theirs."""
        current = len(self.state.workers)
        if self.elastic is None:
            return current, current
        capacity = current if self.capacity is None else self.capacity
        if not self.elastic.fits(capacity):
            return None
        return current, self.elastic.size_for(capacity)

    def _note_resume(self, content: dict[str, Any]) -> None:
        """The first progress after a restart is the point the run resumed from."""
        history = self.state.restart_history
        if history and history[-1].get("resumed_from") is None and history[-1]["generation"] == self.state.generation:
            history[-1]["resumed_from"] = {"epoch": content.get("epoch"), "step": content.get("step")}
            history[-1]["resumed_at"] = self.wall()
            self.policy.progressed()


def _worker_status(state: str) -> WorkerStatus:  # the relay checks it (protocol/wire.py): others never come
    return WorkerStatus(state) if state in {s.value for s in WorkerStatus} else WorkerStatus.RUNNING
