"""Real Ray clusters on this machine for the Ray tests.

``running_cluster()``: a head node and a second node (two raylets, one CPU each, on this machine's address —
Ray replaces 127.0.0.1 by it).

``running_cluster(MULTI_NODE_IPS)``: a multi-node cluster as on many machines, the one all the Ray tests share
(tests/integration/ray/conftest.py starts it once for that folder). Every 127.x.y.z address is
this machine's loopback, so a head with no CPUs of its own and worker nodes started with ``--node-ip-address
127.0.0.2`` (.3, .4), one CPU each, are distinct Ray nodes with distinct addresses: a worker placed on one
binds and is reached at its node's address, and ``kill_node`` ends one node (its ``ray start`` session,
raylet included, ``kill -9``) as when a machine vanishes. The head's health checks are quick
(``FAST_NODE_DEATH_ENV``) so that Ray declares a killed node dead within seconds.

Each node is ``ray start --block`` in a session of its own so that teardown ends exactly what it started.
Tests that need Ray are skipped, saying so, when it is not installed (the ``ray`` extra).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from conftest import wait_until

from nbworkers.magics.backends.ray.backend import ACTOR_PROCESS_TITLE

RAY_INSTALLED = importlib.util.find_spec("ray") is not None
NO_RAY = 'Ray is not installed: pip install "nbworkers[ray]" (the ray extra) to run the Ray backend tests'
needs_ray = pytest.mark.skipif(not RAY_INSTALLED, reason=NO_RAY)

RAY_START_TIMEOUT = 180  # seconds for `ray start` to bring a node up (slow on a loaded 2-core machine)
RAY_START_ATTEMPTS = 3  # `ray start` tries per node (see RayTestCluster._start_node)
RAY_NODES_TIMEOUT = 120  # seconds for both nodes to show up in the cluster
NODE_STARTED = r"Ray runtime started"  # a worker node's `ray start` says so once its raylet registered (ray_cli.py)
RAY_STOP_GRACE = 20  # seconds `ray start --block` gets to stop its processes after SIGTERM
ACTORS_GONE_TIMEOUT = 60  # seconds for Ray to end the actors after a stop or the kernel's death
WORKERS_UP_TIMEOUT = 240  # seconds until both workers run (Ray starts an actor process per worker)
RUN_TIMEOUT = 600  # seconds for a whole training run with one restart
# `ray` with a patient node start: Ray's own waits a fixed 30 s for the raylet to register (tests/ray_cli.py).
RAY_CLI = [sys.executable, str(Path(__file__).with_name("ray_cli.py"))]
# Hermetic: a token in ~/.ray/auth_token (Ray writes one when ray.init() starts a local cluster) would
# otherwise switch `ray start` to token authentication.
RAY_TEST_ENV = {"RAY_AUTH_MODE": "disabled"}
# Worker nodes of the multi-node cluster: loopback addresses, each a Ray node of its own (one CPU each).
MULTI_NODE_IPS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
# Ray's GCS declares a node dead after this many missed health checks, one a second (default: 5 every 3 s
# after 5 s): the multi-node cluster's head uses it so that a killed node is noticed within seconds.
# A raylet gives a worker process it started (an actor's) 60 s to register, then starts another one beside it: on a
# loaded machine Ray's import alone took longer, and the retries piled up until the actors' start timed out (120 s).
PATIENT_WORKER_START_ENV = {"RAY_worker_register_timeout_seconds": "180"}
FAST_NODE_DEATH_ENV = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "1000",
                       "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "3"}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_line(path: Path, pattern: str, proc: subprocess.Popen, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        found = re.search(pattern, text)
        if found:
            return found
        if proc.poll() is not None:
            raise RuntimeError(f"`ray start` exited with {proc.returncode}:\n{text[-3000:]}")
        time.sleep(0.5)
    raise TimeoutError(f"`ray start` did not print {pattern!r} in {timeout} s:\n{text[-3000:]}")


class RayTestCluster:
    """Ray nodes on this machine, started and ended by the tests only. ``node_ips``: one worker node per entry
    (None: this machine's address, as Ray picks it; else that ``--node-ip-address``), the head with
    ``head_cpus``; ``env``: more variables for every node and for the checks' drivers (Ray's TLS: test_ray_tls.py)."""

    def __init__(self, node_ips: tuple[str | None, ...] = (None,), head_cpus: int = 1,
                 env: dict[str, str] | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="nbw-ray-"))  # short: Ray's socket paths must fit 107 bytes
        self.procs: list[subprocess.Popen] = []
        self.node_ips = node_ips
        self.head_cpus = head_cpus
        self.nodes: dict[str, subprocess.Popen] = {}  # a worker node's --node-ip-address -> its `ray start`
        self.last_started: subprocess.Popen | None = None
        self.address = ""
        self.own_env = bool(env)
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **RAY_TEST_ENV, **PATIENT_WORKER_START_ENV, **(env or {})}
        env.pop("RAY_ADDRESS", None)
        self.env = env

    def _start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
        out = self.root / f"{name}.out"
        proc = subprocess.Popen(
            [*RAY_CLI, "start", *args, "--temp-dir", str(self.root / name), "--disable-usage-stats",
             "--object-store-memory", str(100 * 1024 * 1024), "--block"],
            stdout=open(out, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env or self.env,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc, out

    def _start_node(self, name: str, args: list[str], pattern: str, env: dict[str, str] | None = None) -> re.Match:
        """`ray start`, tried again when it fails (its raylet gets ray_cli.REGISTER_TIMEOUT to register, not Ray's
        fixed 30 s, which a loaded machine missed: "The current node timed out during startup"). One node at a time:
        started together (tried), they took longer than one after the other on this CPU-bound machine."""
        for attempt in range(1, RAY_START_ATTEMPTS + 1):
            proc, out = self._start(f"{name}{attempt}", args, env)
            try:
                found = wait_for_line(out, pattern, proc, RAY_START_TIMEOUT)
                self.last_started = proc
                return found
            except (RuntimeError, TimeoutError):  # it exited, or hung
                if attempt == RAY_START_ATTEMPTS:
                    raise
                self._end_session(proc)

    def _end_session(self, proc: subprocess.Popen) -> None:
        for member in self.session_processes():
            try:
                if os.getsid(member.pid) == proc.pid:
                    member.kill()
            except (OSError, psutil.Error):
                pass
        proc.wait(timeout=10)

    def start(self) -> "RayTestCluster":
        head_env = dict(self.env, **FAST_NODE_DEATH_ENV) if any(self.node_ips) else self.env
        self.address = self._start_node("head", [
            "--head", "--node-ip-address", "127.0.0.1", "--port", str(free_port()), "--num-cpus",
            str(self.head_cpus), "--include-dashboard", "false", "--ray-client-server-port", str(free_port()),
        ], r"ray start --address='([^']+)'", head_env).group(1)
        for ip in self.node_ips:
            self.add_node(ip, wait=False)
        joined = wait_until(lambda: self.alive_nodes() == 1 + len(self.node_ips), RAY_NODES_TIMEOUT, interval=1)
        assert joined, f"not all {len(self.node_ips)} worker nodes joined"
        return self

    def add_node(self, ip: str | None, wait: bool = True) -> None:
        """Start a worker node (again, after ``kill_node``: a fresh raylet at the same address)."""
        before = self.alive_nodes() if wait else 0
        name = f"node-{ip or 'host'}-{len(self.procs)}"
        self._start_node(name, ["--address", self.address, "--num-cpus", "1",
                                *(["--node-ip-address", ip] if ip else [])], NODE_STARTED)
        if ip:
            self.nodes[ip] = self.last_started
        if wait:
            assert wait_until(lambda: self.alive_nodes() == before + 1, RAY_NODES_TIMEOUT, interval=1), \
                f"the node at {ip} never joined"

    def kill_node(self, ip: str) -> None:
        """``kill -9`` one worker node as when its machine vanishes: its raylet's process group (the node's `ray
        start` session: raylet, agents and Ray's worker processes, the actors included)."""
        proc = self.nodes.pop(ip)
        os.killpg(proc.pid, signal.SIGKILL)
        self._end_session(proc)  # any member in a group of its own

    def alive_nodes(self) -> int:
        """How many nodes the head's GCS counts alive: asked from this process (Ray's GCS client, no driver: each
        new process would pay Ray's import, seconds of CPU); a cluster with settings of its own (TLS) is asked by a
        driver in a process with its environment."""
        if self.own_env:
            return self._alive_nodes_by_driver()
        from ray._raylet import GcsClient
        from ray.core.generated import gcs_pb2

        try:  # a client per question: none outlives the cluster in this process (its channel would retry the GCS)
            gcs = GcsClient(address=self.address)
            nodes = gcs.get_all_node_info(timeout=30).values()
            del gcs
        except Exception:  # the GCS does not answer (yet)
            return 0
        return sum(1 for node in nodes if node.state == gcs_pb2.GcsNodeInfo.ALIVE)

    def _alive_nodes_by_driver(self) -> int:
        code = f"import ray; ray.init(address={self.address!r}, logging_level='ERROR'); " \
               "print('ALIVE_NODES', sum(1 for n in ray.nodes() if n['Alive']))"
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=self.env, timeout=120)
        found = re.search(r"^ALIVE_NODES (\d+)$", result.stdout, re.M)  # Ray may print warnings too
        return int(found.group(1)) if result.returncode == 0 and found else 0

    def session_processes(self) -> list[psutil.Process]:
        """Every live process in the sessions of the `ray start` commands started here (Ray's own and its
        workers, the actors included)."""
        sessions = {p.pid for p in self.procs}
        found = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getsid(proc.pid) in sessions and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (OSError, psutil.Error):
                continue
        return found

    def actor_processes(self) -> list[psutil.Process]:
        found = []
        for proc in self.session_processes():
            try:
                if " ".join(proc.cmdline()).startswith(ACTOR_PROCESS_TITLE):
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def stop(self) -> None:
        members = self.session_processes()
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=RAY_STOP_GRACE)
            except subprocess.TimeoutExpired:
                pass
        for proc in members + self.session_processes():
            try:
                proc.kill()
            except psutil.Error:
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


def pooled_actor_pids(kernel) -> set[int]:
    """The pids of the actors the test kernel keeps idle for warm runs (magics/backends/ray/groups/pool.py)."""
    return set(kernel.value("sorted(__import__('nbworkers.magics.backends.ray.groups.pool', fromlist=['_'])"
                            ".actor_pool().idle_actor_pids())"))


def only_pooled_actors_left(kernel, cluster: RayTestCluster, count: int) -> bool:
    """The run ended: the ``count`` actors of its group are all that is left, idle in the kernel's pool."""
    left = {proc.pid for proc in cluster.actor_processes()}
    return len(left) == count and left == pooled_actor_pids(kernel)


def running_cluster(node_ips: tuple[str | None, ...] = (None,)):
    """The body of a ``ray_cluster`` fixture: ``yield from running_cluster()`` (skips without Ray); with
    ``MULTI_NODE_IPS``, a head without CPUs and a worker node at each of those addresses."""
    if not RAY_INSTALLED:
        pytest.skip(NO_RAY)
    cluster = RayTestCluster(node_ips, head_cpus=0 if any(node_ips) else 1)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        assert not cluster.session_processes(), "Ray processes outlived the test cluster"
