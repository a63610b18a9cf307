"""One Ray-hosted worker as the cluster sees it (``RayWorkerProcess``, the interface of ``local.WorkerProcess``):
its exit code from the actor, stop/kill/stack requests sent to the actor, and the node's log copied back into
the kernel's run directory a chunk every ``log_mirror_interval`` seconds when the node does not share files, and
the worker's session save (if it made one) copied back there once its group is gone (``state_copy``).

When the actor dies, the worker is gone (exit code -SIGKILL). If Ray has declared its node dead, the log's last
line says so (``failures.NODE_LOST_MARKER``): the supervisor then classifies the exit as ``NodeLost``. An actor
Ray calls unavailable (its connection broke) is asked again until Ray knows whether it or its node died."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nbworkers.magics.backends.ray.nodes import state_copy
from nbworkers.magics.run.core.failures import NODE_LOST_MARKER


@dataclass
class RemoteHost:
    """Stands in for the local host's ``Popen`` in the cluster's state file: the host runs on a Ray node,
    so there is no local pid for the server extension to signal (``pid`` is None)."""

    node_ip: str
    node_pid: int
    pid: None = None


def node_label(where: dict[str, Any]) -> str:
    """``IP node ABCDEF12``: a Ray node as the views show it (several nodes may share a host name)."""
    node_id = str(where.get("node_id") or "")
    return f"{where['ip']} node {node_id[:8]}" if node_id else str(where["ip"])


class ActorOwner(Protocol):
    """What a worker needs of the backend that launched it (``backend.RayBackend``; a protocol, so that this
    module does not import the backend, which imports it)."""

    settings: Any  # backend.RaySettings: call_timeout, poll_interval, log_mirror_interval, log_mirror_chunk
    grace: float  # seconds between TERM and KILL when the worker is stopped

    def release_actor(self, proc: "RayWorkerProcess") -> None: ...


class RayWorkerProcess:
    """One worker as the cluster sees it (the interface of ``local.WorkerProcess``), hosted by a Ray actor."""

    def __init__(self, backend: ActorOwner, index: int, actor: Any, log_path: Path, started: dict[str, Any],
                 where: dict[str, Any], generation: int = 0):
        import ray

        self._ray = ray
        self._backend = backend
        self._settings = backend.settings
        self.index = index
        self.actor = actor
        self.log_path = log_path
        self.node = where
        self.host = RemoteHost(node_ip=where["ip"], node_pid=started["host_pid"])
        # what %workers and the widget show as the worker's host: its node's address and short id
        self.node_label = node_label(where)
        self.node_log = started["log"]
        self.remote_worker_pid: int | None = None
        self._mirrored = started["shared"]  # the node writes the kernel's log file itself: nothing to copy
        self._own_files = not started["shared"]  # its session save is on the node: copied back at close
        self.generation = generation
        self._offset = started["offset"]
        self._mirror_ref = None
        self._last_mirror = 0.0
        self._wait_ref = actor.wait.remote()
        self._code: int | None = None
        self._last_check = 0.0
        self._sent: list[Any] = []  # fire-and-forget calls, collected so that their errors are not reported
        self._closed = False
        self._launch = started.get("launch")  # the actor's launch this worker is (pooled actors host many in turn)
        self.reusable = False  # closed with the actor alive and its host reaped: the actor may host the next run

    # The cluster records the pid a worker reports (``hello``) here and hands these to the state file as
    # process groups to kill from the kernel's machine. A pid on another machine must never be used so.
    @property
    def worker_pid(self) -> int | None:
        return None

    @worker_pid.setter
    def worker_pid(self, pid: int | None) -> None:
        self.remote_worker_pid = pid

    def pgids(self) -> list[int]:
        return []  # nothing of this worker runs in a process group of the kernel's machine

    def note_worker(self, pid: int, zygote_pids: frozenset[int] = frozenset()) -> None:
        """Kept as ``remote_worker_pid``, never signalled from here; the actor records it when it is the worker
        a zygote on its node forked for it (nodes/host_actor.py ``note_worker``), so that its ``kill`` reaches that
        one too."""
        self.worker_pid = pid
        self._sent.append(self.actor.note_worker.remote(pid))

    def processes(self) -> list[tuple[int, float]]:
        return []  # nothing on the kernel's machine

    def poll(self) -> int | None:
        """The worker's exit code (negative: killed by that signal), or None while it runs."""
        if self._code is not None:
            return self._code
        now = time.monotonic()
        if now - self._last_check < self._settings.poll_interval:
            return None
        self._last_check = now
        self._mirror_step()
        ready, _ = self._ray.wait([self._wait_ref], timeout=0)
        if not ready:
            return None
        try:
            raw = self._ray.get(self._wait_ref, timeout=self._settings.call_timeout)
            code = -(raw - 128) if raw > 128 else raw
        except self._ray.exceptions.ActorUnavailableError:
            # The connection to the actor broke (its process or its node is gone, or the network hiccuped):
            # Ray tells which once its GCS knows (a dead node: after its missed health checks). Ask again.
            self._wait_ref = self.actor.wait.remote()
            self._last_check = now + self._settings.unavailable_retry_interval
            return None
        except Exception as error:  # the actor died: its node went away, or Ray killed it
            self._code = -signal.SIGKILL
            self._mirror_rest()  # what the node's log holds, if it can still be read, before the note
            reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            if self._node_alive():
                self._note(f"--- nbworkers: the Ray actor hosting worker {self.index} on {self.node_label} died:"
                           f" {reason}\n")
            else:  # the last line of the log: the supervisor's classification reads it (failures.NodeLost)
                self._note(f"{NODE_LOST_MARKER} Ray node {self.node_label} (hosting worker {self.index}) is dead"
                           f" ({reason})\n")
            return self._code
        self._mirror_rest()
        self._code = code
        return code

    def _node_alive(self) -> bool:
        """Does Ray still count this worker's node among its live nodes? (True when it cannot tell.)"""
        try:
            for node in self._ray.nodes():
                if node.get("NodeID") == self.node.get("node_id"):
                    return bool(node.get("Alive"))
        except Exception:
            pass
        return True

    def alive(self) -> bool:
        return self.poll() is None

    def _send(self, method: str, *args: Any) -> None:
        """A call for this worker alone: the actor ignores it once it hosts another launch (it came late)."""
        if self._code is None and not self._closed:
            self._sent.append(getattr(self.actor, method).remote(*args, launch=self._launch))

    def request_stop(self) -> None:
        """Ask the host to stop the worker group (INT, TERM, grace, KILL); returns at once."""
        self._send("tell", "stop")

    def dump_stacks(self) -> None:
        self._send("tell", "stacks")

    def kill(self) -> None:
        """SIGKILL the host's and the worker's process groups on the node; returns at once."""
        self._send("kill")

    def close(self) -> None:
        """The group is gone: leave nothing on the node, then release the actor (and, with the last one,
        the placement group)."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        try:
            released = ray.get(self.actor.release.remote(self._backend.grace),
                               timeout=self._backend.grace + self._settings.call_timeout)
        except Exception:  # the actor is gone already: its host saw its stdin close and stopped the worker
            released = False
        self.reusable = released is True
        self._mirror_rest()
        self._copy_state_back()
        self._forget_sent()
        self._backend.release_actor(self)

    def _forget_sent(self) -> None:
        if not self._sent:
            return
        ready, _ = self._ray.wait(self._sent, num_returns=len(self._sent), timeout=0)
        for ref in ready:
            try:
                self._ray.get(ref, timeout=0)
            except Exception:
                pass
        self._sent = []

    def _copy_state_back(self) -> None:
        """The worker's session save on its node (none unless it saved before this restart), kept in the kernel's
        run directory for the next workers (``state_copy``); why not, in its log."""
        if not self._own_files:
            return
        self._own_files = False
        run_dir = self.log_path.parent
        try:
            answer = self._ray.get(
                self.actor.read_state.remote(self.generation, self.index, self._settings.saved_state_max_bytes),
                timeout=self._settings.saved_state_copy_timeout)
            files, why = state_copy.checked_answer(answer, self.generation, self.index,
                                                   self._settings.saved_state_max_bytes)
            if files:
                state_copy.write_tree(run_dir, files, replace=(self.generation, self.index))
                state_copy.drop_older(run_dir, self.generation)
        except Exception as error:  # the actor or its node is gone: nothing to copy
            why = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        if why:
            self._note(f"--- nbworkers: worker {self.index}'s session save was not copied from {self.node_label}:"
                       f" {why}\n")

    # ------------------------------------------------------------------ the node's log, copied back
    def _note(self, text: str) -> None:
        try:
            with open(self.log_path, "ab") as log:
                log.write(text.encode())
        except OSError:
            pass

    def _append(self, data: bytes, offset: int) -> None:
        if data:
            try:
                with open(self.log_path, "ab") as log:
                    log.write(data)
            except OSError:
                pass
        self._offset = offset

    def _mirror_step(self) -> None:
        if self._mirrored:
            return
        if self._mirror_ref is not None:
            ready, _ = self._ray.wait([self._mirror_ref], timeout=0)
            if not ready:
                return
            ref, self._mirror_ref = self._mirror_ref, None
            try:
                self._append(*self._ray.get(ref, timeout=0))
            except Exception:
                return
        now = time.monotonic()
        if now - self._last_mirror >= self._settings.log_mirror_interval:
            self._last_mirror = now
            self._mirror_ref = self.actor.read_log.remote(self._offset, self._settings.log_mirror_chunk)

    def _mirror_rest(self) -> None:
        """Everything the node's log holds and the kernel's copy does not yet (at the worker's exit)."""
        if self._mirrored:
            return
        ray = self._ray
        try:
            if self._mirror_ref is not None:
                ref, self._mirror_ref = self._mirror_ref, None
                self._append(*ray.get(ref, timeout=self._settings.call_timeout))
            while True:
                data, offset = ray.get(self.actor.read_log.remote(self._offset, self._settings.log_mirror_chunk),
                                       timeout=self._settings.call_timeout)
                self._append(data, offset)
                if not data:
                    break
        except Exception:
            pass
        self._mirrored = self._closed or self._code is not None
