"""A real two-node Ray cluster on this machine for the Ray tests (``ray_cluster``, module-scoped), shared by
tests/integration/test_ray_backend.py and tests/integration/test_sessions_ray.py (``yield from running_cluster()``
in a fixture).

The cluster: a head node and a second node (two raylets, one CPU each, on this machine's address — Ray
replaces 127.0.0.1 by it), each ``ray start --block`` in a session of its own so that teardown ends exactly
what it started. Tests that need Ray are skipped, saying so, when it is not installed (the ``ray`` extra).
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
RAY_STOP_GRACE = 20  # seconds `ray start --block` gets to stop its processes after SIGTERM
ACTORS_GONE_TIMEOUT = 60  # seconds for Ray to end the actors after a stop or the kernel's death
WORKERS_UP_TIMEOUT = 240  # seconds until both workers run (Ray starts an actor process per worker)
RUN_TIMEOUT = 600  # seconds for a whole training run with one restart
RAY_BIN = Path(sys.executable).with_name("ray")
# Hermetic: a token in ~/.ray/auth_token (Ray writes one when ray.init() starts a local cluster) would
# otherwise switch `ray start` to token authentication.
RAY_TEST_ENV = {"RAY_AUTH_MODE": "disabled"}


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
    """Two Ray nodes on this machine, started and ended by this test module only."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="nbw-ray-"))  # short: Ray's socket paths must fit 107 bytes
        self.procs: list[subprocess.Popen] = []
        self.address = ""
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", **RAY_TEST_ENV)
        env.pop("RAY_ADDRESS", None)
        self.env = env

    def _start(self, name: str, args: list[str]) -> tuple[subprocess.Popen, Path]:
        out = self.root / f"{name}.out"
        proc = subprocess.Popen(
            [str(RAY_BIN), "start", *args, "--temp-dir", str(self.root / name), "--disable-usage-stats",
             "--object-store-memory", str(100 * 1024 * 1024), "--block"],
            stdout=open(out, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc, out

    def _start_node(self, name: str, args: list[str], pattern: str) -> re.Match:
        """`ray start`, tried again when it fails: its raylet must register within a fixed 30 s, which a
        loaded machine can miss ("The current node timed out during startup")."""
        for attempt in range(1, RAY_START_ATTEMPTS + 1):
            proc, out = self._start(f"{name}{attempt}", args)
            try:
                return wait_for_line(out, pattern, proc, RAY_START_TIMEOUT)
            except RuntimeError:
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
        self.address = self._start_node("head", [
            "--head", "--node-ip-address", "127.0.0.1", "--port", str(free_port()), "--num-cpus", "1",
            "--include-dashboard", "false", "--ray-client-server-port", str(free_port()),
        ], r"ray start --address='([^']+)'").group(1)
        self._start_node("node", ["--address", self.address, "--num-cpus", "1"], r"Ray runtime started")
        joined = wait_until(lambda: self.alive_nodes() == 2, RAY_NODES_TIMEOUT, interval=2)
        assert joined, "the second node never joined"
        return self

    def alive_nodes(self) -> int:
        code = f"import ray; ray.init(address={self.address!r}, logging_level='ERROR'); " \
               "print(sum(1 for n in ray.nodes() if n['Alive']))"
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=self.env, timeout=120)
        return int(result.stdout.strip().splitlines()[-1]) if result.returncode == 0 and result.stdout.strip() else 0

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


def running_cluster():
    """The body of a module's ``ray_cluster`` fixture: ``yield from running_cluster()`` (skips without Ray)."""
    if not RAY_INSTALLED:
        pytest.skip(NO_RAY)
    cluster = RayTestCluster()
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        assert not cluster.session_processes(), "Ray processes outlived the test cluster"
