"""The declared shapes of what passes between the parts: a run's snapshot and the backend interface.

``ClusterSnapshot`` / ``WorkerSnapshot`` are the one shape of a run, whoever holds it:

- ``ClusterState.snapshot()`` (magics/run/core/state.py) makes it: the live views, the widget and ``%workers`` read it;
- the supervisor writes it to ``state.json`` with the process fields (``hostname`` .. ``run_id``), without the
  metric ``history`` and with metrics encoded as strict JSON (``wire.encode_metrics``);
- ``run_listing.describe(full=True)`` adds the liveness fields read from outside the kernel (the REST API's
  ``GET /clusters/<name>``), ``%workers attach`` adds ``attached``; the REST API adds ``*_iso`` times beside
  the Unix ones (magics/rundir/rest_fields.py).

Fields only some of those carry are ``NotRequired``; every consumer reads them with ``.get``. Statuses are the
string values of ``protocol/statuses.py``. ``RunRow`` is the short row of a listing (``describe(full=False)``).

``Backend`` / ``WorkerHandle`` are what the supervisor needs of a backend (``backends/local.py``,
``magics/backends/ray/backend.py``) and of one launched worker. Imports nothing of nbworkers at run time.

No ``from __future__ import annotations`` here: TypedDict reads ``NotRequired`` from evaluated annotations only
(``ClusterSnapshot.__optional_keys__``).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NotRequired, Protocol, TypedDict

# The snapshot key views read: the traceback is raised below the summary, so the summary leaves it out.
ERROR_BELOW_KEY: Final = "error_below"


@dataclass(frozen=True)
class Placement:
    """Where a backend put one worker: the address its peers reach its TensorFlow server at (its TF_CONFIG
    entry, ``host:port``) and the GPUs it sees (its ``CUDA_VISIBLE_DEVICES``; ``-1``: none)."""

    host: str
    port: int
    gpus: str


class RestartEntry(TypedDict, total=False):
    """One restart of the group (``restart_history``)."""

    generation: int
    cause: str
    kind: str  # the WorkerFailure class (magics/run/core/failures.py)
    worker: int | None
    time: float  # Unix time of the restart
    resumed_from: dict[str, int | None] | None  # epoch, step of the first progress after it (None until then)
    resumed_at: float  # Unix time of that progress
    workers: list[int]  # an elastic group's size before and after the restart (only when it changed)


class WorkerSnapshot(TypedDict):
    index: int
    role: str  # chief, worker, ps, evaluator
    role_index: int
    host: str
    pid: int | None
    status: str  # a WorkerStatus value
    detail: str
    exit_code: int | None  # negative: killed by that signal
    epoch: int | None  # 1-based, as Keras prints it
    epochs_total: int | None
    step: int | None
    steps_total: int | None
    metrics: dict[str, Any]  # name -> float (in state.json: strict JSON, "nan"/"inf" as strings)
    steps_per_sec: float | None
    restarts: int
    log_path: str
    log_tail: list[str]
    log_total: int  # complete lines seen so far
    log_open: bool  # the tail's last line has no newline yet
    log_hidden: int  # TensorFlow C++ start-up lines kept out of the tail
    # (global_step, ((metric, value), ...)); a {metric: value} dict is read too (metric_items); not in state.json
    history: NotRequired[list[tuple[int, Any]]]


class ClusterSnapshot(TypedDict):
    name: str
    backend: str
    status: str  # a ClusterStatus value
    error: str
    started: float  # Unix time
    ended: float | None
    wall_time: float
    restarts: int
    restart_causes: list[str]
    restart_history: list[RestartEntry]
    failure_kind: str
    generation: int
    run_dir: str
    dropped: dict[str, int]  # relay messages refused, by reason
    kernel_pid: int | None
    kernel_id: str
    workers: list[WorkerSnapshot]
    elastic: NotRequired[dict[str, int]]  # --min-workers: {"min": M, "max": N} (magics/run/core/elastic.py)
    # state.json (the supervisor's process fields)
    hostname: NotRequired[str]
    host_pids: NotRequired[list[int | None]]
    worker_pgids: NotRequired[list[int]]
    run_id: NotRequired[str]
    isolation: NotRequired[dict[str, str]]  # {"mode": "namespace"} | {"mode": "off", "reason": ...} (isolation.py)
    cell_id: NotRequired[str]  # the notebook cell that started the run (the execute request's ``cellId``)
    notebook: NotRequired[str]  # its notebook's path as the kernel got it (``JPY_SESSION_NAME``)
    # run_listing.describe(full=True): seen from outside the kernel
    recorded_status: NotRequired[str | None]  # what the state file says (status: what is true, e.g. "lost")
    kernel_alive: NotRequired[bool]
    processes_alive: NotRequired[int]
    state_age: NotRequired[float | None]
    stop_requested: NotRequired[bool]
    # %workers attach, a blocking wait, the REST API
    attached: NotRequired[bool]
    output_echoed: NotRequired[bool]  # summary.ECHOED_KEY: a blocking wait wrote the output into the cell
    error_below: NotRequired[bool]  # ERROR_BELOW_KEY: the traceback is raised below the summary
    session: NotRequired[dict[str, Any]]  # %%worker --session: its cells, idle/busy (magics/sessions/session.py)
    started_iso: NotRequired[str]
    ended_iso: NotRequired[str]


class KernelRef(TypedDict):
    id: str
    pid: int | None


class RunProgress(TypedDict):
    """A run's epoch/step progress in a listing (its chief's; ``run_listing.progress_of``)."""

    epoch: int | None
    epochs_total: int | None
    step: int | None
    steps_total: int | None
    fraction: float | None  # share of the training done, 0..1, when the totals are known


class RunRow(TypedDict):
    """A run in a listing (``run_listing.describe(full=False)``, ``GET /nbworkers/api/clusters``, the sidebar)."""

    name: str
    kernel: KernelRef
    backend: str
    workers: int
    worker_status: list[str | None]
    started: float | None
    ended: float | None
    wall_time: float | None
    restarts: int
    error: str
    run_dir: str
    status: str
    recorded_status: str | None
    kernel_alive: bool
    processes_alive: int
    state_age: float | None
    stop_requested: bool
    restart_requested: bool
    detached: bool  # %%worker --detach: run by a supervisor process of its own (its kernel_pid is that process's)
    workers_alive: int  # processes not ended (0 once the run has ended)
    nodes: list[str]  # the hosts its workers run on
    progress: RunProgress | None
    steps_per_sec: float | None  # the chief's
    session: dict[str, Any] | None  # %%worker --session: cells, idle/busy (magics/sessions/session.py)
    isolation: dict[str, str] | None  # state.json's (backends/isolation.py); None: recorded by an older nbworkers
    cell_id: str  # the notebook cell that started it ("": not known); the sidebar runs it again after a kernel restart
    notebook: str  # that cell's notebook, as the kernel got its path ("": not known)


class HostProcess(Protocol):
    """A worker's host process: a local ``subprocess.Popen``, or a Ray node's ``RemoteHost`` (no local pid)."""

    @property
    def pid(self) -> int | None: ...


class WorkerHandle(Protocol):
    """One launched worker as the supervisor drives it (``local.WorkerProcess``, ``ray_worker.RayWorkerProcess``)."""

    index: int
    log_path: Path

    @property
    def host(self) -> HostProcess: ...

    worker_pid: int | None  # the pid the worker reported (``hello``); None off this machine
    node_label: str  # the worker's machine as the backend knows it ("": its host name, as the worker says it)

    def poll(self) -> int | None: ...  # exit code (negative: killed by that signal), None while it runs
    def request_stop(self) -> None: ...  # INT, TERM, the stop grace, KILL; returns at once
    def dump_stacks(self) -> None: ...
    def pgids(self) -> list[int]: ...  # process groups of this machine to kill
    def note_worker(self, pid: int, zygote_pids: frozenset[int] = frozenset()) -> None: ...  # its hello's pid
    def processes(self) -> list[tuple[int, float]]: ...  # (pid, create time) this kernel started on this machine
    def kill(self) -> None: ...
    def alive(self) -> bool: ...
    def close(self) -> None: ...


class PlannedTask(Protocol):
    """One process a backend places (``launch.tfconfig.Task``): its role and index within that role."""

    @property
    def role(self) -> str: ...

    @property
    def index(self) -> int: ...


class RelayKeys(Protocol):
    """What a backend may do with the run's relay (``run.relay.RelayReceiver``): let a node's CurveZMQ key in."""

    def allow_client(self, public_key: str, worker: int | None = None) -> None: ...


# What a run records in ``state.json`` (``isolation``) and ``%workers`` shows (backends/isolation.py):
# {"mode": "namespace"} | {"mode": "off", "reason": "..."} (a Ray run adds "ray_tls")
IsolationFact = dict[str, str]


class Backend(Protocol):
    """Where workers run (``%%worker --backend``): plans their addresses and GPUs, launches them. Made by its
    registration (``magics/backends/registry.py``: ``BackendKind.create``)."""

    @property
    def name(self) -> str: ...  # its registered name: the snapshot's ``backend``

    @property
    def encrypt_relay(self) -> bool: ...  # the relay crosses machines: CurveZMQ (ray); False: a private ipc socket

    def relay_hosts(self) -> tuple[str, str | None]: ...  # (bind, advertise) addresses of the kernel's relay
    def attach_relay(self, relay: RelayKeys) -> None: ...  # the run's relay, once bound (ray: allows each node's key)
    def capacity(self) -> int: ...  # how many workers it can place now (--min-workers: elastic runs)
    def isolation_fact(self) -> IsolationFact: ...  # the run's isolation (state.json, %workers)
    def plan(self, tasks: Sequence[PlannedTask], gpus_per_worker: int | None) -> list[Placement]: ...
    def launch(self, index: int, python: str, env: dict[str, str], cwd: str, log_path: Path, grace: float,
               role: str = "worker") -> WorkerHandle: ...
    def close(self) -> None: ...  # the run ended: let go of what the backend held for it (a no-op if nothing)


class View(Protocol):
    """A live view of a cluster in a cell's output (``view.TextView``, ``widget.ClusterWidgetView``)."""

    def show(self) -> None: ...
    def update(self, snapshot: ClusterSnapshot) -> None: ...  # at most every flush_interval seconds
    def finish(self, snapshot: ClusterSnapshot) -> None: ...  # the run ended: leave the final summary
