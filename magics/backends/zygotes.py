"""The kernel's zygotes: one fork server per (interpreter, import-time environment), started on first use.
(On Ray nodes: one per node as well, kept by an actor there: magics/backends/ray/node_zygotes.py.)

A zygote (``nbworkers.distlib.worker.zygote``) imports its framework once (TensorFlow; for ``--framework jax``, JAX,
Keras on JAX and TensorFlow when installed: ``NBWORKERS_FRAMEWORK`` is part of its key) and forks workers, so a cold
``%%worker -n N`` pays one import instead of N, and every later run, restart and session start pays a fork.
``LocalBackend`` asks ``socket_for(python, env, cwd)`` for each worker and passes the socket to the worker's host
(``host --zygote``), which asks the zygote for the fork and supervises the child as it does a spawned worker.

- **Key**: the interpreter plus the variables that matter at ``import tensorflow`` / ``import keras``
  (``IMPORT_TIME_PREFIXES``, ``IMPORT_TIME_NAMES``: ``TF_USE_LEGACY_KERAS``, ``KERAS_*``, ``TF_*``, library paths,
  ``HOME``...). Everything else — ``TF_CONFIG``, ``--env`` values, ``CUDA_VISIBLE_DEVICES`` (read by CUDA only at
  ``cuInit``, which the zygote never reaches: see ``distlib/worker/zygote.py``), the relay, the cell — is applied in
  the child. A cell that changes its environment or calls ``use_tf_keras()`` before importing TensorFlow
  (``cell_scan.CHANGES_ENVIRONMENT``) is spawned: its import must see its own environment.
- **Fallback to spawning**: ``settings().zygote = False`` (or ``$NBWORKERS_ZYGOTE=0``); a zygote that died:
  the launch that finds it dead spawns its workers with a note in their logs,
  and a new zygote is started for the next launch; a zygote that cannot fork (its interpreter lacks
  nbworkers' worker side, the guard refused, no answer within ``zygote_fork_timeout``): the host spawns, noted.
- **Prewarm** (``zygote_prewarm``, on by default): ``prewarm()`` starts the zygote a default ``%%worker`` run
  would use when the extension loads, so the first cell forks instead of waiting for TensorFlow's import. A first
  cell that runs on other machines (``--backend ray``) stops it while it still imports (``yield_prewarm``).
- **Lifetime**: a zygote with no running worker and no fork for ``zygote_idle_timeout`` seconds exits (code 0,
  its memory freed); the next launch starts a new one, quietly (it pays one import, as a first run does).
  Each zygote holds a pipe from the kernel on its stdin; at end of file — the kernel's exit, even
  ``kill -9``, or the kernel dropping it — it forks no more and exits once its children have ended (their hosts
  stop them when the kernel dies). At most ``zygotes_max`` are kept (the oldest is released). Only this kernel
  stops it (its own ``Popen``: the pid cannot have been reused before it is reaped); no run records it, so no
  reaper or REST stop ever signals it. It carries ``NBWORKERS_SPARE=<run root>`` (found by ``strays`` in tests;
  the name is historical) and ``NBWORKERS_RUN_ID`` = a placeholder that no run has: each worker it forks writes
  its run's id over it in its own ``/proc`` environment (``protocol/private/marker.py``), so a forked worker carries
  its run's marker as a spawned one does.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from nbworkers.host.command import ZYGOTE_MODULE, zygote_serving
from nbworkers.magics.backends.run_env import base_env
from nbworkers.magics.frameworks import registry as frameworks
from nbworkers.magics.launch.environment import worker_env
from nbworkers.magics.settings import settings as current_settings
from nbworkers.procs.kill import kill_group
from nbworkers.procs.ownership import RUN_ID_ENV, ZYGOTE_MARKER_ENV
from nbworkers.protocol import cell_scan, env_settings, wire
from nbworkers.protocol.cell_scan import CellScan
from nbworkers.protocol.private.dirs import module_command, runtime_dir, socket_path
from nbworkers.protocol.private.marker import RUN_ID_PLACEHOLDER

ZYGOTE_DIR_NAME = "nbworkers-zygote"
IMPORT_TIME_PREFIXES = ("TF_", "TENSORFLOW", "KERAS", "JAX_", "CUDA", "XLA", "LD_", "PYTHON", "OMP_", "MKL", "KMP_",
                        "NVIDIA", "HIP", "ROCM", "TPU", "GRPC", "ZMQ", "JUPYTER", "TORCH")
# NBWORKERS_FRAMEWORK: what the zygote imports ahead (TensorFlow, or JAX, Keras and TensorFlow: distlib/frameworks)
IMPORT_TIME_NAMES = frozenset({"HOME", "PATH", "TMPDIR", env_settings.FRAMEWORK.name})
CHILD_ONLY = frozenset({"CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED"})  # and the frameworks' variables: child_only()


def child_only() -> frozenset[str]:
    """The variables only a zygote's children get: ``CHILD_ONLY`` and every framework's (TF_CONFIG)."""
    return CHILD_ONLY | frameworks.variables()


def import_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of a worker's environment that its zygote must have had when it imported TensorFlow."""
    return {k: v for k, v in base_env(env).items()
            if k not in child_only() and (k.startswith(IMPORT_TIME_PREFIXES) or k in IMPORT_TIME_NAMES)}


def interpreter_path(python: str) -> str:
    """``python`` made absolute, symlinks kept: a virtual environment's ``bin/python`` is a symlink to the base
    interpreter, and only its own path makes it that environment (its ``pyvenv.cfg``, its site-packages)."""
    return os.path.normpath(os.path.abspath(python))


def zygote_key(python: str, env: dict[str, str]) -> str:
    blob = json.dumps([interpreter_path(python), sorted(import_env(env).items())])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def why_not_forked(code_path: str, cwd: str, scan: CellScan | None = None) -> str | None:
    """None when the cell may run in a forked worker, else why it is spawned (``scan``: the launch's
    ``cell_scan``; the cell file at ``code_path`` is scanned when not given)."""
    scan = scan or cell_scan.scan_file(code_path, cwd)
    if scan is None:
        return None  # bootstrap reports the unreadable cell as a spawned worker would
    if scan.changes_environment:
        return "the cell changes its environment (or calls use_tf_keras) before TensorFlow is imported"
    return None


@dataclass
class Zygote:
    key: str
    python: str
    proc: subprocess.Popen
    socket_path: str
    log_path: str
    marker_root: str
    started: float = field(default_factory=time.monotonic)
    forks: int = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def release(self) -> None:
        """End of file on its stdin: it forks no more and exits once its running workers have ended."""
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def stop(self) -> None:
        """At the kernel's exit (its workers are being stopped too): release it, SIGKILL its group if it lingers."""
        self.release()
        try:
            self.proc.wait(timeout=current_settings().zygote_stop_timeout)
        except subprocess.TimeoutExpired:
            kill_group(self.proc.pid)  # SIGKILL its group: this kernel's own child, not reaped, so the pid is its
            self.proc.wait()
        if self.proc.returncode == 0:  # a clean exit: its log holds nothing worth keeping
            try:
                os.unlink(self.log_path)
            except OSError:
                pass

    def describe(self) -> dict:
        return {"pid": self.proc.pid, "key": self.key, "python": self.python, "alive": self.alive(),
                "forks": self.forks, "age": round(time.monotonic() - self.started, 1), "log": self.log_path}


class ZygotePool:
    def __init__(self):
        self._lock = threading.RLock()
        self._zygotes: dict[str, Zygote] = {}
        self.replaced = 0
        self._checked: dict[str, bool] = {}
        self._spawning: dict[tuple, str] = {}  # the launch that found its zygote dead -> the note

    def socket_for(self, python: str, env: dict[str, str], cwd: str) -> tuple[str | None, str]:
        """(socket path, note): a socket to fork this worker from, or None and why it is spawned instead."""
        config = current_settings()
        if not config.zygote:
            return None, ""

        reason = why_not_forked(env.get(wire.ENV_CODE, ""), cwd, cell_scan.from_env(env))
        if reason is not None:
            return None, f"spawned, not forked: {reason}"
        if not self._can_serve(python, config):
            return None, ("spawned, not forked: this interpreter has no nbworkers zygote "
                          "(nbworkers.distlib.worker.zygote)")
        key = zygote_key(python, env)
        launch = (key, env.get(wire.ENV_RUN_DIR, ""), env.get(wire.ENV_GENERATION, ""))
        with self._lock:
            if launch in self._spawning:  # an earlier worker of this launch found its zygote dead
                return None, self._spawning[launch]
            zygote = self._zygotes.get(key)
            if zygote is not None and not zygote.alive() and zygote.proc.returncode == 0:
                del self._zygotes[key]  # it exited after zygote_idle_timeout: a new one, as for a first run
                zygote = None
            if zygote is not None and not zygote.alive():
                code = zygote.proc.returncode
                del self._zygotes[key]
                self.replaced += 1
                self._start(key, python, env, config)  # for the next launch
                note = (f"the zygote {zygote.proc.pid} died (exit {code}); this launch spawns its workers, "
                        f"a new zygote is starting for the next one (the dead one's log: {zygote.log_path})")
                self._spawning = {launch: note}
                return None, note
            if zygote is None:
                zygote = self._start(key, python, env, config)
            zygote.forks += 1
            return zygote.socket_path, ""

    def prewarm(self, environ: dict[str, str] | None = None) -> Zygote | None:
        """Start the zygote a default run of this kernel's interpreter would fork from (``zygote_prewarm``), in
        the background; None when zygotes or prewarming are off, or it is already there."""
        config = current_settings()
        if not (config.zygote and config.zygote_prewarm):
            return None

        base = os.environ if environ is None else environ
        env = worker_env(base, {}, frameworks.blank(), "", {})  # what a default run gets
        key = zygote_key(sys.executable, env)
        with self._lock:
            zygote = self._zygotes.get(key)
            if zygote is not None and zygote.alive():
                return None
            return self._start(key, sys.executable, env, config)

    def yield_prewarm(self) -> int:
        """Stop the zygotes still importing that no launch has asked for (``prewarm``'s, ``forks == 0``), when a
        run starts whose workers run on other machines (``BackendKind.runs_here`` false: Ray's): their import would
        only take this machine's CPU from that run's start (the kernel's import of Ray, its connection; on a
        simulated cluster, the nodes' own processes). A zygote whose imports are done is kept: it costs nothing
        now. The next local run starts one, as a first run does. How many were stopped."""
        with self._lock:
            importing = [z for z in self._zygotes.values()
                         if z.forks == 0 and z.alive() and not zygote_serving(z.log_path)]
            for zygote in importing:
                del self._zygotes[zygote.key]
        for zygote in importing:  # SIGKILL: it reads its stdin only once its imports are done
            kill_group(zygote.proc.pid)  # this kernel's own child, not reaped yet: the pid is still its
            zygote.proc.wait()
        return len(importing)

    def _can_serve(self, python: str, config) -> bool:
        """Does ``python`` have nbworkers' zygote (a ``--python`` interpreter may have an older nbworkers)?"""
        if interpreter_path(python) == interpreter_path(sys.executable):
            return True
        if python not in self._checked:
            try:
                result = subprocess.run(
                    [python, "-c",
                     "import sys\nif sys.path[:1] == ['']: del sys.path[0]\nimport nbworkers.distlib.worker.zygote"],
                    capture_output=True, timeout=config.python_check_timeout, cwd=str(runtime_dir(ZYGOTE_DIR_NAME)),
                )
                self._checked[python] = result.returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                self._checked[python] = False
        return self._checked[python]

    def _start(self, key: str, python: str, env: dict[str, str], config) -> Zygote:
        while len(self._zygotes) >= max(1, config.zygotes_max):
            oldest = min(self._zygotes.values(), key=lambda z: z.started)
            del self._zygotes[oldest.key]
            oldest.release()  # the workers it forked for a running cluster finish first
        name = f"{key[:8]}-{os.getpid()}-{secrets.token_hex(4)}"
        socket_file = socket_path(ZYGOTE_DIR_NAME, f"{name}.sock")
        socket_path_text, log_path = str(socket_file), str(socket_file.with_suffix(".log"))
        zygote_env = {k: v for k, v in base_env(env).items() if k not in child_only()}
        zygote_env[ZYGOTE_MARKER_ENV] = str(config.run_root)
        zygote_env[RUN_ID_ENV] = RUN_ID_PLACEHOLDER  # a forked worker writes its run's id over it (proc_marker.py)
        zygote_env["PYTHONUNBUFFERED"] = "1"
        with open(log_path, "ab") as log:
            os.chmod(log_path, 0o600)
            proc = subprocess.Popen(
                module_command(python, ZYGOTE_MODULE, "--socket", socket_path_text,
                               "--idle-timeout", str(config.zygote_idle_timeout), unbuffered=True),
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=zygote_env,
                cwd=str(socket_file.parent),
                start_new_session=True, close_fds=True,
            )
        zygote = Zygote(key, python, proc, socket_path_text, log_path, zygote_env[ZYGOTE_MARKER_ENV])
        self._zygotes[key] = zygote
        return zygote

    def pid_at(self, socket_file: str) -> int | None:
        """The pid of this kernel's zygote listening at ``socket_file`` (the host checks its peer is that one)."""
        with self._lock:
            return next((z.proc.pid for z in self._zygotes.values() if z.socket_path == socket_file), None)

    def pids(self) -> frozenset[int]:
        with self._lock:
            return frozenset(z.proc.pid for z in self._zygotes.values())

    def describe(self) -> list[dict]:
        with self._lock:
            return [z.describe() for z in self._zygotes.values()]

    def close(self) -> None:
        with self._lock:
            zygotes, self._zygotes = list(self._zygotes.values()), {}
        for zygote in zygotes:
            zygote.stop()


_pool: ZygotePool | None = None
_pool_lock = threading.Lock()


def zygote_pids() -> frozenset[int]:
    """The pids of this kernel's zygotes (a forked worker's parent: ``local.WorkerProcess.note_worker``)."""
    return frozenset() if _pool is None else _pool.pids()


def zygotes() -> ZygotePool:
    """This kernel's zygotes."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ZygotePool()
            atexit.register(_pool.close)
        return _pool
