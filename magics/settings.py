"""Every tunable of the kernel side in one traitlets Configurable.

Set them from Jupyter/IPython config (``c.WorkerSettings.stop_grace = 10``) or at run time
(``nbworkers.settings().stop_grace = 10``). Every timeout the kernel side uses is named here.
"""

from __future__ import annotations

import os
from pathlib import Path

from traitlets import Bool, Float, Int, Unicode, default
from traitlets.config import Configurable


class WorkerSettings(Configurable):
    run_root = Unicode(help="Where run directories (per-worker logs, cell code, state) are written.").tag(
        config=True
    )
    flush_interval = Float(0.25, help="Seconds between updates of a cluster's output (at most 4 a second).").tag(
        config=True
    )
    poll_interval = Float(0.05, help="Seconds the supervisor waits for relay traffic before checking processes.").tag(
        config=True
    )
    stop_grace = Float(5.0, help="Seconds between SIGTERM and SIGKILL when a worker group is stopped.").tag(
        config=True
    )
    failure_grace = Float(2.0, help="Seconds the other workers get after one failed, before they are stopped.").tag(
        config=True
    )
    port_retries = Int(3, help="Relaunches of a group whose TensorFlow server could not bind its port.").tag(
        config=True
    )
    max_restarts = Int(3, help="Group restarts after retryable failures (crash, OOM, preemption, stall); --max-restarts.").tag(
        config=True
    )
    restart_backoff = Float(1.0, help="Seconds before the first restart; doubles with each further restart.").tag(
        config=True
    )
    restart_backoff_max = Float(30.0, help="The longest wait before a restart, in seconds.").tag(config=True)
    stall_timeout = Float(1800.0, help="Seconds without any progress (logs, metrics) before the watchdog acts; 0: off.").tag(
        config=True
    )
    stack_dump_wait = Float(3.0, help="Seconds the watchdog gives workers to write their stacks before acting.").tag(
        config=True
    )
    evaluator_grace = Float(60.0, help="Seconds the evaluator may keep running after training ended before it is stopped.").tag(
        config=True
    )
    log_tail_lines = Int(300, help="Log lines per worker kept in the kernel and shown; the full log is on disk.").tag(
        config=True
    )
    python_check_timeout = Float(60.0, help="Seconds allowed to check that a --python interpreter can run workers.").tag(
        config=True
    )
    state_file_interval = Float(1.0, help="Seconds between writes of a running cluster's state.json.").tag(config=True)
    spares = Int(-1, help="Warm spare workers (TensorFlow imported) kept after a run for the next one: -1 as many as "
                 "the last cluster had workers, 0 off, N that many (at most spares_max). Default: $NBWORKERS_SPARES or -1.").tag(
                     config=True)
    spares_max = Int(4, help="Most warm spares kept at once (each holds about 0.5 GB).").tag(config=True)
    spare_idle_timeout = Float(600.0, help="Seconds an unused warm spare is kept before it is stopped.").tag(config=True)
    spare_memory_mb = Int(600, help="Memory one warm spare is expected to take, in MB.").tag(config=True)
    spare_min_available_mb = Int(2048, help="Available memory (MB) spares must leave; below it they are dropped.").tag(
        config=True
    )
    spare_check_interval = Float(0.5, help="Seconds between checks of the spare pool (refill, expiry, memory).").tag(
        config=True
    )
    widget = Bool(True, help="Show the live widget (else only the text/HTML view).").tag(config=True)

    @default("spares")
    def _default_spares(self) -> int:
        try:
            return int(os.environ.get("NBWORKERS_SPARES", "-1"))
        except ValueError:
            return -1

    @default("run_root")
    def _default_run_root(self) -> str:
        return os.environ.get("NBWORKERS_RUN_ROOT") or str(Path.home() / ".nbworkers" / "runs")


_settings: WorkerSettings | None = None


def settings() -> WorkerSettings:
    """The process-wide settings (configured from the IPython config when the extension loads)."""
    global _settings
    if _settings is None:
        _settings = WorkerSettings()
    return _settings


def configure(config) -> WorkerSettings:
    global _settings
    _settings = WorkerSettings(config=config)
    return _settings
