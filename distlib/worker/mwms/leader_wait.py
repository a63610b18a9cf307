"""Wait for the coordination leader's server before connecting to it, so no worker pays gRPC's reconnect backoff.

Under MultiWorkerMirroredStrategy every training task connects to the coordination service on the leader
(``chief`` 0, else ``worker`` 0) while its eager context starts. When a task gets there before the leader's
server is listening, its first connection attempt is refused and gRPC waits out its reconnect backoff
(1 s at first, growing) before trying again. Measured here (2 workers, 2 cores; ``benchmarks/``): the
strategy took ~0.07 s when the leader was first and ~1.0 s when another worker was, which happened in
about half of the runs, hand-launched or not.

``wait_for_leader(info)`` runs just before this process starts its context (``collective_startup`` and
``strategy_setup``): a task that is not the leader tries a plain TCP connection to the leader's address every
few milliseconds and returns as soon as one is accepted (the leader's gRPC server is up), then TensorFlow
connects at once. It never fails: after ``NBWORKERS_LEADER_WAIT`` seconds (default 600) it returns and
TensorFlow's own connection logic and timeouts take over. The leader, evaluators, parameter-server clusters
and processes outside a cluster return at once.
"""

from __future__ import annotations

import socket
import time

from nbworkers.distlib.cluster import TRAINING_JOBS, TaskInfo
from nbworkers.protocol import env_settings

ENV_LEADER_WAIT = env_settings.LEADER_WAIT.name
DEFAULT_LEADER_WAIT_S = env_settings.LEADER_WAIT.default  # then TensorFlow connects (and times out) as without us
FAST_POLL_S = 0.005  # between connection attempts during the first FAST_POLL_FOR_S seconds
FAST_POLL_FOR_S = 5.0
SLOW_POLL_S = 0.05  # afterwards (a leader still importing or loading data)
CONNECT_TIMEOUT_S = 1.0  # one attempt; a refused connection returns at once

_waited = False


def leader_wait_s() -> float:
    return env_settings.LEADER_WAIT.get()


def leader_address(info: TaskInfo) -> str | None:
    """``host:port`` of the coordination leader when this task must connect to it, else None."""
    if not info.in_cluster or info.type not in TRAINING_JOBS or info.uses_parameter_servers:
        return None
    leader_job = next((job for job in TRAINING_JOBS if info.cluster.get(job)), None)
    if leader_job is None or (info.type, info.index) == (leader_job, 0):
        return None
    return info.cluster[leader_job][0]


def _split(address: str) -> tuple[str, int] | None:
    host, _, port = address.rpartition(":")
    host = host.strip("[]")  # [::1]:2222
    try:
        return host, int(port)
    except ValueError:
        return None


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def wait_for_leader(info: TaskInfo, timeout_s: float | None = None) -> bool:
    """Return once the leader accepts connections (True), or after the wait (False). Once per process."""
    global _waited
    if _waited:
        return True
    address = leader_address(info)
    target = _split(address) if address else None
    if target is None:
        _waited = True
        return True
    timeout_s = leader_wait_s() if timeout_s is None else timeout_s
    started = time.monotonic()
    while True:
        if _accepts(*target):
            _waited = True
            return True
        waited = time.monotonic() - started
        if waited >= timeout_s:
            return False
        time.sleep(FAST_POLL_S if waited < FAST_POLL_FOR_S else SLOW_POLL_S)
