"""Warm spares: worker interpreters started after a run, TensorFlow already imported, waiting for the next one.

Since zygotes (``zygotes``, issue 17) a local worker is forked whenever a zygote can serve it; the pool only
serves (and only refills after) launches a zygote did not: ``zygote`` off, or a worker that had to be spawned.

Importing TensorFlow costs ~3 s and ~0.5 GB per process, most of a worker's start. After a cluster's
workers have ended, the pool starts as many *spares* as the cluster had workers (``settings().spares``:
-1 = that many, 0 = off, N = N; never more than ``spares_max``). A spare is a worker host (``host --spare``)
with its worker interpreter (``bootstrap --spare``) that has imported TensorFlow and nbworkers' worker-side
modules and then blocks reading its assignment: it has no ``TF_CONFIG``, created no tensor, started no
TensorFlow server and holds no port. When the next cell launches, ``LocalBackend.launch`` takes a spare
whose *key* matches and hands it the run (``assign``: log file, grace, role, environment, directory);
the worker then runs the cell exactly as a cold one would.

Spares never leak into a different run:
- the key is the interpreter's path plus the worker's whole environment except the per-run variables
  (``TF_CONFIG``, the relay address and key, worker index, generation, run dir, cell path, push file, cwd):
  another ``--python``, another ``--env``, a changed kernel environment, other GPUs: no match, a cold start;
  the cell's directory is not part of the key (the spare changes into it and puts it first on ``sys.path``);
- only cells that use TensorFlow get spares (the cell or a module of its directory that it imports mentions
  tensorflow/keras/distlib), and never a cell that changes its own environment or calls ``use_tf_keras()``
  (what ``import tensorflow`` sees would then differ from a cold start).

Cost: spares start only when no cluster of this kernel is running (they would slow its training) — except
when a worker of a running group fails: the group is then stopped and perhaps restarted, and spares started
at once import TensorFlow while the survivors are being stopped, so a restart starts warm —, only while
``spare_min_available_mb`` of memory stays available after ``spare_memory_mb`` more, are dropped (oldest first)
when available memory falls below that, after ``spare_idle_timeout`` seconds unused, when ``spares`` is set
to 0, and with the kernel: each host holds a pipe from the kernel and stops its worker at end of file, even
after a ``kill -9`` of the kernel (as for every worker). Spares carry ``NBWORKERS_SPARE=<run root>`` in their
environment, so tools and tests can find them.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from nbworkers.distlib import env_settings, session_wire, wire

from .. import cell_scan
from ..cell_scan import CellScan
from ..ownership import RUN_ID_ENV, RunMarker
from ..private_dirs import runtime_dir
from ..process_kill import kill_groups
from ..settings import settings as current_settings
from .host_command import host_command

SPARES_DIR_NAME = "nbworkers-spares"  # the spares' neutral working directory (private_dirs.runtime_dir)
SPARE_MARKER_ENV = env_settings.SPARE.name  # in a spare's environment: the run root of the kernel that started it
# Variables that differ from run to run (or worker to worker) and are handed over with the assignment.
PER_RUN_VARIABLES = frozenset({
    "TF_CONFIG", wire.ENV_RELAY, wire.ENV_KEY, wire.ENV_CLUSTER, wire.ENV_WORKER, wire.ENV_GENERATION,
    wire.ENV_RUN_DIR, wire.ENV_CODE, wire.ENV_PUSH, wire.ENV_CWD, wire.ENV_CELL_SCAN, RUN_ID_ENV,
    session_wire.ENV_SESSION, session_wire.ENV_COMMANDS,  # a session's workers start warm too
})
DISCARD_KILL_AFTER = 3.0  # seconds a dropped spare gets to go (its host stops it at end of file) before SIGKILL
def base_env(env: dict[str, str]) -> dict[str, str]:
    """The part of a worker's environment that a spare is started with (everything but per-run variables)."""
    return {k: v for k, v in env.items() if k not in PER_RUN_VARIABLES and k != SPARE_MARKER_ENV}


def spare_key(python: str, env: dict[str, str]) -> str:
    """Spares are interchangeable exactly when interpreter path and non-per-run environment are equal."""
    blob = json.dumps([python, sorted(base_env(env).items())])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def why_not_warm(code_path: str, cwd: str, scan: CellScan | None = None) -> str | None:
    """None when the cell may run on a spare, else the reason it may not (``scan``: the launch's
    ``cell_scan``; the cell file at ``code_path`` is scanned when not given)."""
    scan = scan or cell_scan.scan_file(code_path, cwd)
    if scan is None:
        return "the cell's code could not be read"
    if not scan.uses_tensorflow:
        return "the cell does not use TensorFlow"
    if scan.changes_environment:
        return "the cell changes its environment (or calls use_tf_keras) before TensorFlow is imported"
    return None


def available_mb() -> float:
    import psutil

    return psutil.virtual_memory().available / 2**20


def spare_cwd() -> str:
    """An empty private directory spares start in (so nothing in the notebook's directory shadows their imports):
    ``$XDG_RUNTIME_DIR/nbworkers-spares`` or ``<tmp>/nbworkers-spares-<uid>`` when private, else a fresh one
    (``private_dirs.runtime_dir``: another user's, a symlink or an open directory is never used)."""
    return str(runtime_dir(SPARES_DIR_NAME))


@dataclass
class Spare:
    key: str
    python: str
    host: subprocess.Popen
    started: float = field(default_factory=time.monotonic)
    ready_at: float | None = None
    worker_pid: int | None = None
    discarded_at: float | None = None
    spare_root: str = ""  # the NBWORKERS_SPARE marker it was started with
    _out: bytes = b""

    def check_ready(self) -> bool:
        """Read the host's ``ready PID`` line, if it came (non-blocking)."""
        if self.ready_at is None and self.host.stdout is not None:
            try:
                chunk = os.read(self.host.stdout.fileno(), 256)
            except (BlockingIOError, OSError, ValueError):
                chunk = b""
            self._out += chunk
            for line in self._out.splitlines():
                parts = line.decode(errors="replace").split()
                if len(parts) == 2 and parts[0] == "ready" and parts[1].isdigit():
                    self.worker_pid = int(parts[1])
                    self.ready_at = time.monotonic()
        return self.ready_at is not None

    def alive(self) -> bool:
        return self.host.poll() is None

    def discard(self) -> None:
        """End of file on the host's stdin: it stops the spare worker and exits."""
        if self.discarded_at is None:
            self.discarded_at = time.monotonic()
            _close(self.host.stdin)
            _close(self.host.stdout)

    def kill(self) -> None:
        """SIGKILL the spare's host and worker groups: only processes that are this kernel's spares (ownership)."""
        marker = RunMarker("", None, "", self.spare_root)
        kill_groups([p for p in (self.host.pid, self.worker_pid) if p], marker)  # SIGKILL (process_kill.py)

    def assign(self, payload: dict[str, Any]) -> bool:
        """Hand this spare its run. False when it is gone (the caller starts a cold worker instead)."""
        self.check_ready()
        stdin = self.host.stdin
        if not self.alive() or stdin is None:
            return False
        try:
            stdin.write(b"assign " + json.dumps(payload).encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        _close(self.host.stdout)  # the host prints nothing more once assigned
        return True

    def describe(self) -> dict[str, Any]:
        now = time.monotonic()
        return {"host_pid": self.host.pid, "worker_pid": self.worker_pid, "ready": self.ready_at is not None,
                "age": round(now - self.started, 2), "key": self.key, "python": self.python}


def _close(stream) -> None:
    if stream is not None:
        try:
            stream.close()
        except OSError:
            pass


@dataclass
class _Group:
    """The workers one launch of a cluster started (one generation), watched to refill spares after them."""

    owner: int  # id() of the backend (one per cluster)
    generation: str
    python: str
    env: dict[str, str]
    grace: float
    eligible: bool
    procs: list[Any] = field(default_factory=list)  # WorkerProcess
    failed_early: bool = False  # a worker failed while the others still ran: spares were started at once

    def ended(self) -> bool:
        return all(p.poll() is not None for p in self.procs)

    def has_failed_worker(self) -> bool:
        return any(p.poll() not in (None, 0) for p in self.procs)


class SparePool:
    """The kernel's spares, and the thread that keeps, refills and drops them. Thread-safe."""

    def __init__(self, config=None):
        self._config = config
        self._lock = threading.RLock()
        self._spares: list[Spare] = []
        self._dropping: list[Spare] = []
        self._groups: list[_Group] = []
        self._latest: dict[int, str] = {}  # backend -> its latest generation
        self._refill: _Group | None = None  # the last ended group, waiting for a quiet moment
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.stats = {"started": 0, "used": 0, "dropped": 0, "cold_reason": ""}

    @property
    def settings(self):
        return self._config or current_settings()

    # ----------------------------------------------------------------------------------- launch side
    def take(self, python: str, env: dict[str, str], cwd: str) -> Spare | None:
        """A live spare for a worker with this interpreter and environment, or None (start it cold)."""
        if self.settings.spares == 0:
            return None
        reason = why_not_warm(env.get(wire.ENV_CODE, ""), cwd, cell_scan.from_env(env))
        key = spare_key(python, env)
        with self._lock:
            if reason is None:
                candidates = [s for s in self._spares if s.key == key and s.alive()]
                candidates.sort(key=lambda s: (not s.check_ready(), s.started))
                if candidates:
                    spare = candidates[0]
                    self._spares.remove(spare)
                    self.stats["used"] += 1
                    return spare
                self.stats["cold_reason"] = "no spare for this interpreter and environment"
            else:
                self.stats["cold_reason"] = reason
        return None

    def note_launch(self, owner: object, python: str, env: dict[str, str], cwd: str, grace: float, proc) -> None:
        """Record a launched worker (warm or cold): when its group has ended, spares are started after it."""
        generation = env.get(wire.ENV_GENERATION, "0")
        with self._lock:
            group = next((g for g in self._groups if g.owner == id(owner) and g.generation == generation), None)
            if group is None:
                eligible = why_not_warm(env.get(wire.ENV_CODE, ""), cwd, cell_scan.from_env(env)) is None
                group = _Group(id(owner), generation, python, base_env(env), grace, eligible)
                self._groups.append(group)
                self._latest[id(owner)] = generation
            group.procs.append(proc)
        self._ensure_thread()

    # ----------------------------------------------------------------------------------- the pool's thread
    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="nbworkers-spares", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while not self._closed:
            try:
                self.tick()
            except Exception:  # the pool is an optimisation: never let it take anything down
                import traceback

                traceback.print_exc(file=sys.__stderr__)
            self._wake.wait(self.settings.spare_check_interval)
            self._wake.clear()

    def tick(self) -> None:
        """One round: reap, drop what must go, notice ended groups, refill when nothing runs."""
        config = self.settings
        now = time.monotonic()
        with self._lock:
            for spare in list(self._spares):
                spare.check_ready()
                if not spare.alive():
                    self._spares.remove(spare)
            for spare in list(self._dropping):
                if not spare.alive():
                    self._dropping.remove(spare)
                elif spare.discarded_at is not None and now - spare.discarded_at > DISCARD_KILL_AFTER:
                    spare.kill()
            if config.spares == 0:
                self._drop_all()
            for spare in list(self._spares):
                idle_since = spare.ready_at or spare.started
                if now - idle_since > config.spare_idle_timeout:
                    self._drop(spare)
            if self._spares and available_mb() < config.spare_min_available_mb:
                self._drop(min(self._spares, key=lambda s: s.started))
            for group in list(self._groups):
                latest = self._latest.get(group.owner) == group.generation
                if group.ended():
                    self._groups.remove(group)
                    if group.eligible and latest and not group.failed_early:
                        self._refill = group
                elif group.eligible and latest and not group.failed_early and group.has_failed_worker():
                    # The group is going down (and may be restarted): its surviving workers are stopped within
                    # the stop grace; spares started now have imported TensorFlow by the relaunch.
                    group.failed_early = True
                    self._fill(group)
            if self._refill is not None and not self._groups:
                group, self._refill = self._refill, None
                self._fill(group)

    def _fill(self, group: _Group) -> None:
        config = self.settings
        wanted = len(group.procs) if config.spares < 0 else config.spares
        wanted = max(0, min(wanted, config.spares_max))
        key = spare_key(group.python, group.env)
        for spare in [s for s in self._spares if s.key != key]:
            self._drop(spare)  # the last run wants other spares: these would only hold memory
        have = sum(1 for s in self._spares if s.key == key)
        for _ in range(wanted - have):
            if available_mb() - config.spare_memory_mb < config.spare_min_available_mb:
                break
            self._spares.append(self._start(key, group))

    def _start(self, key: str, group: _Group) -> Spare:
        env = dict(group.env)
        env[SPARE_MARKER_ENV] = str(self.settings.run_root)
        command = host_command(group.python, ["--spare", "--grace", str(group.grace)], ["--spare"])
        host = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
            cwd=spare_cwd(), start_new_session=True, close_fds=True,
        )
        if host.stdout is not None:  # (a pipe: always)
            os.set_blocking(host.stdout.fileno(), False)
        self.stats["started"] += 1
        return Spare(key=key, python=group.python, host=host, spare_root=env[SPARE_MARKER_ENV])

    def _drop(self, spare: Spare) -> None:
        if spare in self._spares:
            self._spares.remove(spare)
        spare.discard()
        self._dropping.append(spare)
        self.stats["dropped"] += 1

    def _drop_all(self) -> None:
        for spare in list(self._spares):
            self._drop(spare)

    # ----------------------------------------------------------------------------------- inspection, control
    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            for spare in self._spares:
                spare.check_ready()
            return [s.describe() for s in self._spares if s.alive()]

    def clear(self) -> None:
        """Drop every spare now (they stop within a moment)."""
        with self._lock:
            self._refill = None
            self._drop_all()
        self._wake.set()

    def close(self) -> None:
        self._closed = True
        with self._lock:
            self._drop_all()
            for spare in self._dropping:
                spare.discard()


_pool: SparePool | None = None
_pool_lock = threading.Lock()


def pool() -> SparePool:
    """This kernel's spare pool."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = SparePool()
            atexit.register(_pool.close)
        return _pool
