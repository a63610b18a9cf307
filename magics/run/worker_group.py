"""The launched processes of one run's current attempt, as the cluster's supervisor thread drives them together.

Holds the ``WorkerHandle`` of each worker (``backends/local``, ``backends/ray``), filled by
``group_launch.launch_group``, and carries out what the supervisor core decided for all of them at once: ask them
to stop, dump their stacks, kill what is left, release them. What to do when is never decided here: that is the
core's (magics/run/core/supervisor.py); this module only knows how to reach the processes.
"""

from __future__ import annotations

from nbworkers.magics.backends.zygotes import zygote_pids
from nbworkers.magics.rundir.layout import read_tail
from nbworkers.magics.shapes import WorkerHandle

# Lines of a failed worker's log read to classify its exit: TensorFlow's graph errors put the exception line
# (UnavailableError: a lost peer) before a "Detected at node ... defined at" stack of 20-40 more lines.
EXIT_LOG_TAIL_LINES = 200


class WorkerGroup:
    def __init__(self) -> None:
        self.handles: list[WorkerHandle] = []  # worker i's handle at index i

    def request_stop(self) -> None:
        """Interrupt every worker (SIGINT: KeyboardInterrupt), then TERM, then KILL after the stop grace (each
        handle's host times it); returns at once."""
        for handle in self.handles:
            handle.request_stop()

    def retire(self, index: int) -> None:
        """Stop one worker (an unawaited task: an evaluator or parameter server once the workers finished)."""
        self.handles[index].request_stop()

    def dump_stacks(self) -> None:
        for handle in self.handles:
            handle.dump_stacks()

    def kill(self) -> None:
        """SIGKILL what is left; only processes that are ours (the handles use procs/process_kill.py)."""
        for handle in self.handles:
            if handle.alive() or handle.pgids():
                handle.kill()

    def close(self) -> None:
        """Release what each handle holds (its host's pipes, a Ray actor); the processes are gone by then."""
        for handle in self.handles:
            handle.close()

    def note_worker(self, index: int, pid: int) -> None:
        """Worker ``index`` said hello from ``pid``: recorded with its create time (a fork of a zygote too)."""
        self.handles[index].note_worker(pid, zygote_pids())

    def node_label(self, index: int) -> str:
        """A remote backend knows the worker's machine better than the worker's host name (simulated nodes)."""
        return self.handles[index].node_label

    def exits(self, running: list[int]) -> list[tuple[int, int, str]]:
        """``(index, exit code, log tail)`` of each worker of ``running`` whose process has exited since; the tail
        (empty for code 0) lets the core classify the failure. A launch that failed half-way has no handle for the
        workers after it: nothing to poll there."""
        found = []
        for index in running:
            if index >= len(self.handles):
                continue
            handle = self.handles[index]
            code = handle.poll()
            if code is not None:
                found.append((index, code, read_tail(handle.log_path, EXIT_LOG_TAIL_LINES) if code else ""))
        return found
