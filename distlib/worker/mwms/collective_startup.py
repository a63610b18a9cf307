"""Let the tutorials' order work: input pipeline first, MultiWorkerMirroredStrategy after.

Upstream, collective ops can only be configured before TensorFlow's eager context starts; the first tensor
or dataset starts it, so ``tf.distribute.MultiWorkerMirroredStrategy()`` after building a dataset raises
``RuntimeError: Collective ops must be configured at program startup``, and enabling them late leaves the
earlier tensors on a device that no longer exists (``/job:localhost/... unknown device``).

Under ``%%worker`` every worker has a ``TF_CONFIG`` for a chief/worker cluster, so we know at startup what
the strategy will need. ``arm()`` (run right after ``import tensorflow``) wraps the eager context's
``ensure_initialized`` on the context object (``compat/collectives_at_start.py``): when the first op starts the
context, it first configures collective ops and the coordination service exactly as MultiWorkerMirroredStrategy
does, with the config
as it is at that moment (memory growth and visible devices set earlier by the cell are kept), then starts
the context, which connects to the other workers. The strategy built later finds everything configured
(``strategy_setup`` makes it skip starting a second server). The wrapper removes itself after the first call,
so nothing is left on the op path; a cell that never runs a TensorFlow op pays nothing.

Which cells get it (``NBWORKERS_EARLY_COLLECTIVES``): "auto" (default) arms it when the cell's code, or a
``.py`` file next to it (the tutorials' ``%%writefile`` modules), mentions a multi-worker strategy or
``distlib`` (the kernel's scan of the cell, ``protocol/cell_scan.py``); a cell that uses TensorFlow without one
keeps running locally (with collectives armed, its first op would wait for every worker to connect, and hang
if some worker never runs TensorFlow). "1" arms it always, "0" never.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from nbworkers.distlib.cluster import TRAINING_JOBS, TaskInfo, TFConfigError, task
from nbworkers.distlib.compat import collectives_at_start
from nbworkers.distlib.worker import stop_signal
from nbworkers.distlib.worker.mwms import leader_wait
from nbworkers.distlib.worker.status import send_status
from nbworkers.protocol import (
    cell_scan,  # standard library only: no kernel machinery
    env_settings,
    wire,
)
from nbworkers.protocol.statuses import WorkerStatus

ENV_EARLY_COLLECTIVES = env_settings.EARLY_COLLECTIVES.name

_enabled_for: TaskInfo | None = None  # the cluster collective ops were enabled for, when we did it


def enabled_for() -> TaskInfo | None:
    """The task collective ops were configured for at context start by ``arm()``, or None."""
    return _enabled_for


def code_mentions_multi_worker(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the cell or a ``.py`` file in its directory mentions a multi-worker strategy: the kernel's scan
    (``NBWORKERS_CELL_SCAN``, ``protocol/cell_scan.py``), else a scan of the cell file (``NBWORKERS_CODE``) with
    the same code. True when there is neither (not started by the worker bootstrap)."""
    env = os.environ if environ is None else environ
    scan = cell_scan.from_env(env)
    if scan is None and env.get(wire.ENV_CODE):
        scan = cell_scan.scan_file(env[wire.ENV_CODE], env.get(wire.ENV_CWD) or os.getcwd())
        if scan is None:  # the cell file is unreadable: its directory still counts
            scan = cell_scan.scan("", env.get(wire.ENV_CWD) or os.getcwd())
    return True if scan is None else scan.multi_worker


def wanted(info: TaskInfo, environ: dict[str, str] | None = None) -> bool:
    """Early collectives apply to a chief/worker cluster task (not ps / evaluator) whose code uses a
    multi-worker strategy, unless NBWORKERS_EARLY_COLLECTIVES says otherwise."""
    env = os.environ if environ is None else environ
    setting = env_settings.EARLY_COLLECTIVES.get(env)  # "auto", "1" or "0"
    if setting == "0":
        return False
    if not (info.in_cluster and info.type in TRAINING_JOBS and set(info.cluster) <= set(TRAINING_JOBS)):
        return False
    return setting == "1" or code_mentions_multi_worker(env)


def arm(tensorflow_module: object = None) -> bool:
    """Prepare collectives to be configured when the eager context starts. True when armed."""
    try:
        info = task()
    except TFConfigError:
        return False  # strategy() / task() will say what is wrong when the cell asks for them
    if not wanted(info):
        return False

    def remember() -> None:
        global _enabled_for
        _enabled_for = info

    def before_connect() -> None:
        peers = info.num_workers - 1  # a run of one worker has none: it only starts its collectives
        send_status(WorkerStatus.WAITING, f"connecting to the other {peers} worker{'s' if peers > 1 else ''}"
                    if peers else "starting TensorFlow's collectives")
        leader_wait.wait_for_leader(info)

    def after_connect() -> None:
        stop_signal.reassert_sigterm()  # the coordination service's C-level SIGTERM handler would swallow a stop
        send_status(WorkerStatus.RUNNING)

    return collectives_at_start.arm(info, before_connect=before_connect, after_connect=after_connect,
                                    on_configured=remember)
