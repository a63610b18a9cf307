"""``--submit``: outside an allocation, ask Slurm for one and wait in the queue, saying why it waits.

The allocation is held by a small batch job (``commands.HOLDER``, ``sbatch --parsable``: its id comes back at once,
so the wait can be watched and given up): it lives while the kernel's heartbeat file is fresh (``Heartbeat``,
touched while the job waits and while its workers run) and ends by itself, at the latest ``heartbeat_timeout``
seconds after the kernel died, even by ``kill -9``; the run's end cancels it at once (``SlurmBackend.close``). The
cell says "queued" with Slurm's reason (``squeue %r``: Resources, Priority, ...) each time it changes, and when the
allocation starts. Interrupting the cell while it waits cancels the job.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from nbworkers.magics.backends.slurm import commands
from nbworkers.magics.backends.slurm.allocation import Allocation, SlurmError, cancel, quiet, run
from nbworkers.magics.backends.slurm.options import SlurmOptions
from nbworkers.magics.backends.slurm.settings import SlurmSettings
from nbworkers.protocol.private.files import open_own

RUNNING = "RUNNING"
NO_REASON = ("", "None")


class Heartbeat:
    """A file the kernel touches (at most every ``every`` seconds) while it wants its submitted allocation."""

    def __init__(self, path: Path, every: float):
        self.path, self.every, self._last = path, every, 0.0

    def beat(self) -> None:
        now = time.monotonic()
        if now - self._last < self.every:
            return
        self._last = now
        try:
            if self.path.exists():
                os.utime(self.path)
            else:
                os.close(open_own(self.path, os.O_WRONLY | os.O_CREAT))
        except OSError:
            pass

    def stop(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass


def submit(options: SlurmOptions, workers: int, name: str, gpus_per_worker: int, heartbeat: Heartbeat,
           settings: SlurmSettings, say: Callable[[str], None] | None = None) -> Allocation:
    """A new allocation for ``workers`` workers, once it runs (``SlurmError``: refused, or ended before it ran)."""
    tell = say or (lambda text: print(text, file=sys.stderr, flush=True))
    nodes = commands.nodes_to_ask(workers, options.spread, options.tasks_per_node)
    per_node = -(-workers // nodes) if nodes else 1
    heartbeat.beat()
    command = commands.sbatch_command(name, nodes, str(heartbeat.path), settings.heartbeat_timeout,
                                      options.partition, options.time, options.account, list(options.slurm_arg or []),
                                      gpus_per_worker * per_node)
    job = run(command, settings.command_timeout, "--submit").strip().split(";")[0]
    started, said = time.monotonic(), None
    try:
        while True:
            state, reason, nodelist = commands.parse_job_state(
                quiet(["squeue", "-h", "-j", job, "-o", "%T|%r|%N"], settings.command_timeout))
            if state == RUNNING:
                tell(f"nbworkers: Slurm job {job} started on {nodelist} after {time.monotonic() - started:.1f} s")
                return Allocation.of_job(job, nodelist, settings.command_timeout)
            if state in commands.ENDED_STATES:
                raise SlurmError(f"--submit: Slurm job {job} ended before it started ({state or 'gone'}"
                                 f"{', ' + reason if reason and reason != 'None' else ''}). Nothing was started.")
            if reason != said and reason not in NO_REASON:  # "None": the scheduler has not looked at it yet
                tell(f"nbworkers: Slurm job {job} queued ({reason})")
                said = reason
            waited = time.monotonic() - started
            if settings.queued_timeout and waited > settings.queued_timeout:
                raise SlurmError(f"--submit: Slurm job {job} still queued after {waited:.0f} s ({reason}); cancelled. "
                                 "Try another --partition or a shorter --time, or raise SlurmSettings.queued_timeout.")
            heartbeat.beat()
            time.sleep(settings.queued_poll_interval)
    except BaseException:  # refused, timed out, or the cell interrupted: the job goes
        cancel(job, settings.command_timeout)
        heartbeat.stop()
        raise
