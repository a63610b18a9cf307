"""Every ``NBWORKERS_*`` environment variable in one table: name, default, parser, where it is read, what it does.

In the style of Ray's ``constants.py``: one declaration per variable, and every module reads its variable through
it (``env_settings.LEADER_WAIT.get()``), so the name, the default and the parsing live here only. The site's
environment table (docs/reference/environment.md) is generated from ``ALL`` at each build (``tools/env_table.py``'s
``render()``, called by docs/_ext/nbworkers_docs.py; tests/integration/test_settings_table_scripts.py checks it).

A value that does not parse never crashes the kernel or a worker: ``get()`` warns once (an
``EnvSettingWarning`` naming the variable, the value given and what to give instead) and uses the default.
Variables nbworkers sets itself for its processes (``set_by_nbworkers``) are listed too, so that the site's
reference names every one of them.

Pure Python: importing this never imports TensorFlow (the kernel and the worker hosts import it).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class EnvSettingWarning(UserWarning):
    """An environment variable had a value nbworkers cannot use: the default applies instead."""


class Parser(Generic[T]):
    """Turns the variable's text into a value; raises ValueError on a bad one. ``expects`` says what to give.

    (Plain classes, not dataclasses, here: every worker and host imports this at start, and ``dataclasses``
    costs ~10 ms to import.)"""

    __slots__ = ("parse", "expects")

    def __init__(self, parse: Callable[[str], T], expects: str):
        self.parse = parse
        self.expects = expects


def _seconds(text: str) -> float:
    value = float(text)
    if math.isnan(value) or value < 0:
        raise ValueError(text)
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value <= 0:
        raise ValueError(text)
    return value


def _integer(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise ValueError(text)
        return value

    return parse


def _switch(text: str) -> bool:
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(text)


def _choice(text: str, choices: tuple[str, ...]) -> str:
    lowered = text.lower()
    if lowered not in choices:
        raise ValueError(text)
    return lowered


def _auto_switch(text: str) -> str:
    """``"auto"``, ``"1"`` or ``"0"`` (the spellings of ``_switch`` accepted)."""
    lowered = text.lower()
    if lowered == "auto":
        return "auto"
    return "1" if _switch(lowered) else "0"


SECONDS = Parser(_seconds, "a number of seconds, 0 or more")
POSITIVE_SECONDS = Parser(_positive_seconds, "a number of seconds above 0")
SWITCH = Parser(_switch, "1 or 0 (or true/false, yes/no, on/off)")
AUTO_SWITCH = Parser(_auto_switch, "auto, 1 or 0")
TEXT = Parser(str, "any text")


def integer(minimum: int) -> Parser[int]:
    return Parser(_integer(minimum), f"a whole number, {minimum} or more")


# Where a variable is read (the "where" column of the site's environment table).
KERNEL = "kernel"
WORKERS = "workers"
KERNEL_AND_WORKERS = "kernel (inherited by the workers)"
HOSTS = "worker hosts"  # the process between the kernel and each worker (host/worker_host.py)
ZYGOTES = "zygotes"  # the processes local workers are forked from (distlib/worker/zygote.py)
SET_IN_WORKERS = "set in each worker"
SET_IN_HOSTS = "set in each host"


class EnvSetting(Generic[T]):
    """One environment variable: its name, default, parser, where it is read and what it does."""

    __slots__ = ("name", "default", "parser", "where", "description", "set_by_nbworkers", "default_text")

    def __init__(self, name: str, default: T, parser: Parser[T], where: str, description: str,
                 set_by_nbworkers: bool = False, default_text: str = ""):
        self.name = name
        self.default = default
        self.parser = parser
        self.where = where
        self.description = description
        self.set_by_nbworkers = set_by_nbworkers  # nbworkers sets it for its own processes; users leave it alone
        self.default_text = default_text  # how the environment table shows the default, when not ``str(default)``

    def __repr__(self) -> str:
        return f"EnvSetting({self.name!r}, default={self.default!r})"

    def get(self, environ: Mapping[str, str] | None = None) -> T:
        """The value in ``environ`` (``os.environ``), parsed; the default when unset, empty or bad (warned)."""
        env = os.environ if environ is None else environ
        text = env.get(self.name, "").strip()
        if not text:
            return self.default
        try:
            return self.parser.parse(text)
        except ValueError:
            warnings.warn(self.problem(text), EnvSettingWarning, stacklevel=2)
            return self.default

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        env = os.environ if environ is None else environ
        return bool(env.get(self.name, "").strip())

    def problem(self, text: str) -> str:
        """What is wrong with ``text`` as this variable's value, and what to give instead."""
        return (f"{self.name}={text!r} is not valid: give {self.parser.expects} (for example "
                f"{self.name}={self.shown_default() or '...'}). Using the default, {self.shown_default() or 'unset'}.")

    def shown_default(self) -> str:
        if self.default_text:
            return self.default_text
        if isinstance(self.default, bool):
            return "1" if self.default else "0"
        if isinstance(self.default, float):
            return f"{self.default:g}"
        return "" if self.default is None else str(self.default)


ALL: list[EnvSetting] = []


def _declare(setting: EnvSetting[T]) -> EnvSetting[T]:
    if any(known.name == setting.name for known in ALL):
        raise ValueError(f"{setting.name} declared twice")
    ALL.append(setting)
    return setting


def by_name(name: str) -> EnvSetting:
    for setting in ALL:
        if setting.name == name:
            return setting
    raise KeyError(name)


# ---- set by users (the kernel's environment is inherited by the workers; `--env NAME=VALUE` sets it per run)

MOCK_DATA = _declare(EnvSetting(
    "NBWORKERS_MOCK_DATA", False, SWITCH, KERNEL_AND_WORKERS,
    "`1`: `distlib.mnist()` uses tfds mock data (no download); the tutorials shrink their runs"))
MOCK_EXAMPLES = _declare(EnvSetting(
    "NBWORKERS_MOCK_EXAMPLES", 512, integer(1), KERNEL_AND_WORKERS, "examples per split of the mock data"))
RUN_ROOT = _declare(EnvSetting(
    "NBWORKERS_RUN_ROOT", "~/.nbworkers/runs", TEXT, "kernel, server",
    "where run directories go (the setting `run_root`)"))
ZYGOTE = _declare(EnvSetting(
    "NBWORKERS_ZYGOTE", True, SWITCH, KERNEL,
    "`0`: spawn every local worker instead of forking it from a zygote (the setting `zygote`)"))
ZYGOTE_PREWARM = _declare(EnvSetting(
    "NBWORKERS_ZYGOTE_PREWARM", True, SWITCH, KERNEL,
    "`0`: start the zygote at the first `%%worker`, not when the extension loads (the setting `zygote_prewarm`; "
    "a prewarmed zygote holds one TensorFlow import's memory until `zygote_idle_timeout`: Benchmarks)"))
ISOLATION = _declare(EnvSetting(
    "NBWORKERS_ISOLATION", "auto", Parser(lambda text: _choice(text, ("auto", "required", "off")),
                                          "auto, required or off"), KERNEL,
    "local runs' workers in a private network namespace: `auto` (when this machine allows it; else said once), "
    "`required` (refuse to launch without it), `off` (the setting `isolation`)"))
RUNTIME_DIR = _declare(EnvSetting(
    "NBWORKERS_RUNTIME_DIR", "", TEXT, "kernel, worker hosts, Ray nodes",
    "where nbworkers makes its private runtime directories (zygote and relay sockets, a Ray node's run files): made "
    "0700 if absent; else `$XDG_RUNTIME_DIR`, else `$TMPDIR` (`/tmp`), refused when another user can rename "
    "things in it (no sticky bit)", default_text="`$XDG_RUNTIME_DIR` or `$TMPDIR`"))
TF215_PYTHON = _declare(EnvSetting(
    "NBWORKERS_TF215_PYTHON", "", TEXT, KERNEL,
    "tutorial 04: the TensorFlow 2.15 interpreter", default_text="a checkout's `.venv-tf215`"))
REPORT_INTERVAL = _declare(EnvSetting(
    "NBWORKERS_REPORT_INTERVAL", 0.25, SECONDS, WORKERS, "seconds between metric messages"))
JAX_COMPILE_CACHE = _declare(EnvSetting(
    "NBWORKERS_JAX_COMPILE_CACHE", True, SWITCH, WORKERS,
    "`0`: a `--framework jax` worker leaves JAX's persistent compilation cache as the user set it (by default "
    "nbworkers keeps compiled programs in a private folder of each machine, so a cell run again compiles nothing: "
    "Keras on JAX)"))
TENSORBOARD = _declare(EnvSetting(
    "NBWORKERS_TENSORBOARD", True, SWITCH, WORKERS, "`0`: `report()` writes no TensorBoard summaries"))
KERAS3_FIX = _declare(EnvSetting(
    "NBWORKERS_KERAS3_FIX", True, SWITCH, WORKERS,
    "`1`: fix Keras 3's `model.fit`/`evaluate`/`predict` and `BackupAndRestore` under "
    "MultiWorkerMirroredStrategy (`distlib/compat/keras3/mwms.py`); `0`: leave Keras alone (`model.fit` then raises "
    "`KerasFitUnderMultiWorkerError`)"))
LEADER_WAIT = _declare(EnvSetting(
    "NBWORKERS_LEADER_WAIT", 600.0, SECONDS, WORKERS,
    "seconds a worker waits for the coordination leader (worker 0 or the chief) to listen before TensorFlow "
    "connects to it (then TensorFlow's own connect and timeouts apply). The wait spares the ~1 s gRPC reconnect "
    "backoff a worker pays when it is ready first"))
EARLY_COLLECTIVES = _declare(EnvSetting(
    "NBWORKERS_EARLY_COLLECTIVES", "auto", AUTO_SWITCH, WORKERS,
    "`auto`, `1`, `0`: configure collectives at the first TensorFlow op, so the tutorials' \"dataset before "
    "strategy\" order works (`auto`: when the cell uses a multi-worker strategy)"))
FACTS_TIMEOUT = _declare(EnvSetting(
    "NBWORKERS_FACTS_TIMEOUT", 120.0, SECONDS, WORKERS,
    "seconds to wait for the other workers' GPU counts after the strategy is built"))
PREEMPTION = _declare(EnvSetting(
    "NBWORKERS_PREEMPTION", "auto", AUTO_SWITCH, WORKERS,
    "`auto` (on in a cluster), `1`, `0`: checkpoint on SIGTERM, then exit 42"))
PREEMPTION_WAIT = _declare(EnvSetting(
    "NBWORKERS_PREEMPTION_WAIT", 2.0, SECONDS, WORKERS,
    "after SIGTERM, seconds without a finished training step (or 3 step times, if longer) before the worker "
    "leaves without a save (a peer died)"))
PREEMPTION_SAVE_TIMEOUT = _declare(EnvSetting(
    "NBWORKERS_PREEMPTION_SAVE_TIMEOUT", 60.0, SECONDS, WORKERS, "seconds from SIGTERM to exit, at most"))
RESTORE_ON_REBUILD = _declare(EnvSetting(
    "NBWORKERS_RESTORE_ON_REBUILD", True, SWITCH, WORKERS,
    "after a session's processes restarted with a save (one worker's error), put each saved model, optimizer, "
    "variable or other trackable back as soon as a cell binds its name again (at that cell's end), so re-running "
    "the cells that build them is all it takes; `0`: only `%workers restore NAME` does"))

STOP_INTERRUPT_GRACE = _declare(EnvSetting(
    "NBWORKERS_STOP_INTERRUPT_GRACE", 1.0, SECONDS, HOSTS,
    "a stopped worker gets SIGINT (KeyboardInterrupt: its `finally:` blocks run), then SIGTERM after this many "
    "seconds if it is still there, then SIGKILL at the `stop_grace` setting"))
LOG_BATCH_INTERVAL = _declare(EnvSetting(
    "NBWORKERS_LOG_BATCH_INTERVAL", 0.05, POSITIVE_SECONDS, HOSTS,
    "seconds between the relay messages that carry a worker's output to the kernel"))
LOG_BATCH_CHARS = _declare(EnvSetting(
    "NBWORKERS_LOG_BATCH_CHARS", 256 * 1024, integer(1), HOSTS,
    "characters of pending output that make a host send them at once, before the interval"))
ZYGOTE_REQUEST_TIMEOUT = _declare(EnvSetting(
    "NBWORKERS_ZYGOTE_REQUEST_TIMEOUT", 10.0, POSITIVE_SECONDS, ZYGOTES,
    "seconds a host that connected to a zygote has to send its whole fork request"))

# ---- set by nbworkers for its own processes

WORKER = _declare(EnvSetting(
    "NBWORKERS_WORKER", 0, integer(0), SET_IN_WORKERS,
    "its index in the group (chief, workers, parameter servers, evaluator)", set_by_nbworkers=True))
GENERATION = _declare(EnvSetting(
    "NBWORKERS_GENERATION", 0, integer(0), SET_IN_WORKERS,
    "launch generation: 0, then 1, 2, ... after restarts", set_by_nbworkers=True))
CLUSTER = _declare(EnvSetting(
    "NBWORKERS_CLUSTER", "", TEXT, SET_IN_WORKERS, "the cluster's name", set_by_nbworkers=True))
RUN_DIR = _declare(EnvSetting(
    "NBWORKERS_RUN_DIR", "", TEXT, SET_IN_WORKERS, "the run directory (logs, cell code, state)",
    set_by_nbworkers=True))
SAVE_COPY_MAX_BYTES = _declare(EnvSetting(
    "NBWORKERS_SAVE_COPY_MAX_BYTES", 0, integer(0), SET_IN_WORKERS + " (`--backend ray`, on a node without the "
    "kernel's files)", "the largest session save the kernel copies back from this node (`RaySettings."
    "saved_state_max_bytes`): a larger one says so in the failed cell and stays on the node; 0: the node shares the "
    "kernel's files", set_by_nbworkers=True))
CODE = _declare(EnvSetting(
    "NBWORKERS_CODE", "", TEXT, SET_IN_WORKERS, "path of the cell's code file", set_by_nbworkers=True))
CWD = _declare(EnvSetting(
    "NBWORKERS_CWD", "", TEXT, SET_IN_WORKERS, "directory the cell runs in (put first on `sys.path`)",
    set_by_nbworkers=True))
CELL_SCAN = _declare(EnvSetting(
    "NBWORKERS_CELL_SCAN", "", TEXT, SET_IN_WORKERS,
    "what the cell uses, scanned once in the kernel (JSON; `protocol/cell_scan.py`)", set_by_nbworkers=True))
PUSH = _declare(EnvSetting(
    "NBWORKERS_PUSH", "", TEXT, SET_IN_WORKERS, "path of the variables pushed to the workers (kernel to worker only)",
    set_by_nbworkers=True))
RELAY = _declare(EnvSetting(
    "NBWORKERS_RELAY", "", TEXT, SET_IN_WORKERS,
    "`ipc://PATH` (local runs) or `tcp://host:port` (`--backend ray`) of the kernel's relay", set_by_nbworkers=True))
KEY = _declare(EnvSetting(
    "NBWORKERS_KEY", "", TEXT, SET_IN_WORKERS, "the relay's HMAC key (hex)", set_by_nbworkers=True))
RELAY_SERVERKEY = _declare(EnvSetting(
    "NBWORKERS_RELAY_SERVERKEY", "", TEXT, SET_IN_WORKERS + " (`--backend ray`)",
    "the relay's CurveZMQ public key", set_by_nbworkers=True))
RELAY_CLIENTKEY = _declare(EnvSetting(
    "NBWORKERS_RELAY_CLIENTKEY", "", TEXT, SET_IN_WORKERS + " (`--backend ray`)",
    "the node's own CurveZMQ client public key (made on the node)", set_by_nbworkers=True))
RELAY_CLIENTSECRET = _declare(EnvSetting(
    "NBWORKERS_RELAY_CLIENTSECRET", "", TEXT, SET_IN_WORKERS + " (`--backend ray`)",
    "the node's own CurveZMQ client secret key (made on the node)", set_by_nbworkers=True))
RUN_ID = _declare(EnvSetting(
    "NBWORKERS_RUN_ID", "", TEXT, "set in each host and worker (a zygote: a placeholder its forked workers overwrite)",
    "the run's random id: only processes carrying it, of the same user and recorded by their kernel (pid and create "
    "time), are ever signalled by the reaper, the REST API's DELETE or a stop", set_by_nbworkers=True))
ZYGOTE_MARKER = _declare(EnvSetting(
    "NBWORKERS_SPARE", "", TEXT, "set in each zygote and inherited by the workers it forks",
    "the run root of the kernel that started the zygote (finds a run root's zygotes in tests and the demo; it proves "
    "no ownership; the name is historical)", set_by_nbworkers=True))
FORKED = _declare(EnvSetting(
    "NBWORKERS_FORKED", "", TEXT, SET_IN_WORKERS + " (forked)", "the pid of the zygote it was forked from",
    set_by_nbworkers=True))
SERVE = _declare(EnvSetting(
    "NBWORKERS_SERVE", False, SWITCH, SET_IN_WORKERS + " (`--ps`)",
    "`1`: run this task's TensorFlow server instead of the cell (the `worker` and `ps` tasks of a "
    "parameter-server cluster)", set_by_nbworkers=True))
FRAMEWORK = _declare(EnvSetting(
    "NBWORKERS_FRAMEWORK", "tf", TEXT, SET_IN_WORKERS + " and their zygotes (`--framework`)",
    "the run's framework (`tf`, `jax`): what its zygote imports ahead and what the worker does before the cell's "
    "code (`distlib/frameworks/`)", set_by_nbworkers=True))
SESSION = _declare(EnvSetting(
    "NBWORKERS_SESSION", "", TEXT, SET_IN_WORKERS + " (`--session`)",
    "the session's name: the worker serves cells instead of running one", set_by_nbworkers=True))
COMMANDS = _declare(EnvSetting(
    "NBWORKERS_COMMANDS", "", TEXT, SET_IN_WORKERS + " (`--session`)",
    "`ipc://PATH` (local) or `tcp://host:port` (`--backend ray`) of the kernel's command socket",
    set_by_nbworkers=True))
NETNS = _declare(EnvSetting(
    "NBWORKERS_NETNS", "", TEXT, SET_IN_WORKERS + " (local runs)",
    "`PID:USER_INODE:NET_INODE`: the run's private network namespace, entered before anything else "
    "(`protocol/private/netns.py`)", set_by_nbworkers=True))
GPU_COUNTS = _declare(EnvSetting(
    "NBWORKERS_GPU_COUNTS", "", TEXT, SET_IN_WORKERS,
    "GPUs per worker, comma-separated in `TF_CONFIG` order (checked before training)", set_by_nbworkers=True))
MAX_LINE_CHARS = _declare(EnvSetting(
    "NBWORKERS_MAX_LINE_CHARS", 64 * 1024, integer(0), SET_IN_HOSTS + " (from `max_line_chars`)",
    "longest output line a host sends to the kernel (at least 80); the log file keeps every byte",
    set_by_nbworkers=True))
VISIBLE_GPUS = _declare(EnvSetting(
    "NBWORKERS_VISIBLE_GPUS", "", TEXT, "set in the nbworkers kernel",
    "the GPUs the workers share (the kernel's own `CUDA_VISIBLE_DEVICES` at start, or `all`)",
    set_by_nbworkers=True))

# ---- TensorFlow's own variables that nbworkers treats specially (listed in the environment table; read where noted)

TF_CPP_MIN_LOG_LEVEL = _declare(EnvSetting(
    "TF_CPP_MIN_LOG_LEVEL", "2", TEXT, WORKERS,
    "unless the kernel's environment or `--env` says otherwise, TensorFlow's C++ start-up chatter (oneDNN, cuda, "
    "absl) is not shown in the notebook or the sidebar (the kernel and the server also drop the lines TensorFlow "
    "2.21 prints before it reads the variable: `magics/run/noise.py`, and the lines about collectives aborted "
    "after one worker's error: `magics/collective_abort.py`); `0`: every line; the log files keep everything"))
TF_USE_LEGACY_KERAS = _declare(EnvSetting(
    "TF_USE_LEGACY_KERAS", "", TEXT, WORKERS + " (`--env`)",
    "`1`: `tf.keras` is tf_keras (Keras 2; TensorFlow reads it)",
    default_text="unset"))
TF_CONFIG = _declare(EnvSetting(
    "TF_CONFIG", "", TEXT, SET_IN_WORKERS, "the cluster and this process's task", set_by_nbworkers=True))
