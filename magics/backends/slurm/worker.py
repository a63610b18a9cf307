"""One worker as the cluster sees it when its host runs as a Slurm job step (the interface of
``local.WorkerProcess``): the ``srun`` that holds the step is this kernel's child, in a session of its own.

Its stdin reaches the host's stdin on the node (srun forwards it, end of file included), so ``stop`` and ``stacks``
go the way they go for a local worker, and a kernel that dies, even by ``kill -9``, closes the pipe and the host
stops its worker (SIGINT first: ``finally:`` runs) and ends the step. Its exit code is the host's (srun passes it on;
128+N: killed by signal N). A step cancelled under it (``scancel``, a node's failure, the job's end) shows
slurmstepd's ``CANCELLED`` line in the log, srun's stderr: the handle then ends the log with
``failures.NODE_LOST_MARKER``, and the supervisor restarts the group from its last checkpoint (``NodeLost``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import psutil

from nbworkers.host.command import tell_host
from nbworkers.magics.backends.slurm import commands
from nbworkers.magics.backends.slurm.allocation import Allocation, cancel
from nbworkers.magics.run.core.failures import NODE_LOST_MARKER
from nbworkers.magics.rundir.layout import read_tail
from nbworkers.procs.kill import kill_group
from nbworkers.procs.ownership import record_of

CANCELLED_TAIL_LINES = 12  # srun's lines after a cancelled step: slurmstepd's CANCELLED among them


class SlurmWorker:
    """A worker whose host is the one task of a job step (``commands.srun_command``), held by a local ``srun``."""

    def __init__(self, index: int, srun: subprocess.Popen, log_path: Path, node: str, step_name: str,
                 allocation: Allocation, command_timeout: float, beat: Callable[[], None] = lambda: None):
        self.index = index
        self.host = srun  # the state file's host pid: the local srun (its end ends the step)
        self.log_path = log_path
        self.node_label = node  # SLURMD_NODENAME of the step's node: the views' and the sidebar's node name
        self.step_name = step_name
        self.remote_worker_pid: int | None = None
        self._allocation = allocation
        self._timeout = command_timeout
        self._step_id = ""
        self._code: int | None = None
        self._beat = beat  # --submit: the kernel is still there (submit.Heartbeat)
        record = record_of(psutil.Process(srun.pid)) if srun.poll() is None else None
        self.records: dict[int, float] = dict([record]) if record else {}

    # The pid the worker's hello gives is on its node: never signalled, never a process group of this machine.
    @property
    def worker_pid(self) -> int | None:
        return None

    @worker_pid.setter
    def worker_pid(self, pid: int | None) -> None:
        self.remote_worker_pid = pid

    def note_worker(self, pid: int, zygote_pids: frozenset[int] = frozenset()) -> None:
        self.remote_worker_pid = pid

    def pgids(self) -> list[int]:
        """srun's session (``start_new_session``): killing it ends the step within seconds."""
        return [self.host.pid] if self.host.poll() is None else []

    def processes(self) -> list[tuple[int, float]]:
        return sorted(self.records.items())

    def step_id(self) -> str:
        """``JOB.STEP`` of this worker's step (found by its name while it runs; kept once found)."""
        if not self._step_id:
            self._step_id = self._allocation.step_id(self.step_name, self._timeout)
        return self._step_id

    def poll(self) -> int | None:
        """The worker's exit code (negative: killed by that signal), or None while its step runs."""
        if self._code is not None:
            return self._code
        code = self.host.poll()
        if code is None:
            self._beat()
            return None
        if code != 0 and commands.step_cancelled(read_tail(self.log_path, CANCELLED_TAIL_LINES)):
            self._note(f"{NODE_LOST_MARKER} Slurm step {self.step_name} (worker {self.index} on node {self.node_label}"
                       f", job {self._allocation.job_id}) was cancelled: scancel, its node's failure or the job's "
                       "end\n")
        self._code = -(code - 128) if code > 128 else code
        return self._code

    def alive(self) -> bool:
        return self.host.poll() is None

    def _tell_host(self, command: str) -> None:
        tell_host(self.host.stdin, command)

    def request_stop(self) -> None:
        """The host stops the worker (INT, TERM, grace, KILL), then its step ends; returns at once."""
        self._tell_host("stop")

    def dump_stacks(self) -> None:
        self._tell_host("stacks")

    def kill(self) -> None:
        """Cancel the step (SIGKILL to its tasks on the node) and kill the local srun, now."""
        if self.host.poll() is None:
            cancel(self.step_id(), self._timeout)
            kill_group(self.host.pid)  # our own child, not reaped yet: its pid is its own

    def close(self) -> None:
        if self.host.stdin:
            try:
                self.host.stdin.close()
            except OSError:
                pass

    def _note(self, text: str) -> None:
        try:
            with open(self.log_path, "ab") as log:
                log.write(text.encode())
        except OSError:
            pass
