"""Restarting and removing a run from outside the kernel that started it (the REST API, for the sidebar).

- Restart: writes the ``restart-requested`` file that the run's supervisor thread takes (even while its kernel
  is busy) and restarts the group on fresh ports. Only a live run of a live kernel can be restarted this way:
  a run that ended has no supervisor left (its notebook restarts it: the widget's Restart, ``.restart()``).
- Remove: deletes the directory of a run that has ended and left no process (its logs, state, cell and
  TensorBoard files). A run that still runs, or a lost run (its kernel died mid-run), must be stopped first:
  nothing is deleted under a live process.

Blocking (file system, process table): called from a worker thread. Imports no TensorFlow.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from nbworkers.magics.rundir.layout import read_state, request_restart
from nbworkers.magics.rundir.liveness import effective_status, is_foreign, kernel_alive, leftover_processes
from nbworkers.protocol.statuses import RECORDED_ENDS


class RunNotRestartable(RuntimeError):
    """The run cannot be restarted from outside its kernel (it ended, or its kernel is gone). Says what to do."""


class RunNotRemovable(RuntimeError):
    """The run still runs or still has processes: stop it first. Says how."""


def restart_run(run_dir: Path) -> None:
    """Ask the run's supervisor to restart its group; returns at once (the listing shows the restart)."""
    state = read_state(run_dir) or {}
    status = effective_status(state)
    if status in RECORDED_ENDS or not kernel_alive(state):
        raise RunNotRestartable(
            f"run {run_dir.name!r} is {status}: only a running run can be restarted from here; run its cell again "
            f"(or the widget's Restart, `nbworkers.get_cluster({run_dir.name!r}).restart()`) in its notebook")
    if is_foreign(state):
        raise RunNotRestartable(f"run {run_dir.name!r} runs on {state.get('hostname')}: restart it from its notebook")
    request_restart(run_dir)


def remove_run(run_dir: Path) -> None:
    """Delete an ended run's directory (refused while the run, or any process of it, is alive)."""
    state = read_state(run_dir) or {}
    status = effective_status(state)
    if state.get("status") not in RECORDED_ENDS:
        raise RunNotRemovable(
            f"run {run_dir.name!r} is {status}, not ended: stop it first (DELETE /nbworkers/api/clusters/"
            f"{run_dir.name}, the sidebar's Stop, or `%workers stop {run_dir.name}`), then remove it")
    if is_foreign(state):
        raise RunNotRemovable(f"run {run_dir.name!r} belongs to {state.get('hostname')}: remove it there")
    left = leftover_processes(state, run_dir)
    if left:
        raise RunNotRemovable(
            f"run {run_dir.name!r} ended but {len(left)} of its processes are still alive: stop it first "
            f"(DELETE /nbworkers/api/clusters/{run_dir.name} kills them), then remove it")
    shutil.rmtree(run_dir)
