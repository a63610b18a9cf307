"""Ray's command line (`ray start ...`) for the test clusters, with a patient node start.

`ray start` waits for its raylet to register with the head for a fixed 30 s (``ray._private.node.Node``: a loop
around ``ray._private.services.get_node`` with a hard-coded ``raylet_start_wait_time_s = 30``, no setting or
environment variable changes it), then gives up: "The current node timed out during startup". A node the tests start
again after killing it missed it whenever other tests ran beside the Ray tests. Here ``get_node`` itself waits
(polling every half second) up to ``NBW_TEST_RAY_REGISTER_S`` seconds (default REGISTER_TIMEOUT) before it reports
the node missing, so Ray's own loop sees the node as soon as it registers; it reports it at once when the raylet
exited. Until it registered, the node runs at a higher CPU priority (START_NICENESS). Run as ``python
tests/ray_cli.py start ...`` (tests/ray_helpers.py).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

REGISTER_TIMEOUT = 150.0  # seconds a raylet gets to register with its head (Ray's own: 30; under RAY_START_TIMEOUT)
POLL_INTERVAL = 0.5
# The raylet also gives its agents (Python: the dashboard and runtime-env agents) a fixed ~15 s to write their port
# files ("Timed out waiting for file .../metrics_agent_port_..." in raylet.out) and exits when they miss it; on a
# loaded machine their imports took longer. Until it registered, the node runs at this niceness (a higher CPU
# priority than the tests beside).
START_NICENESS = -10


class RayletExited(Exception):
    """The node's raylet exited before it registered (not a RuntimeError: Ray's own loop does not ask again)."""


def patient(get_node: Callable[[Any, Any], dict], timeout: float, raylet_alive: Callable[[], bool],
            on_found: Callable[[], None] = lambda: None, interval: float = POLL_INTERVAL):
    """``get_node`` asked again every ``interval`` s while it raises RuntimeError (node not registered yet), for up to
    ``timeout`` s; then its last error. A raylet that exited never registers: RayletExited at once (`ray start`
    fails and the tests start the node again). ``on_found`` runs once the node is found."""

    def wait_for_node(gcs_address: Any, node_id: Any) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                found = get_node(gcs_address, node_id)
            except RuntimeError as error:
                if not raylet_alive():
                    raise RayletExited(f"the raylet exited before it registered (its raylet.out says why): {error}")
                if time.monotonic() >= deadline:
                    raise
            else:
                on_found()
                return found
            time.sleep(interval)

    return wait_for_node


def raylet_alive() -> bool:
    """Whether a raylet this `ray start` started still runs."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            if child.name() == "raylet" and child.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            continue
    return False


def set_session_niceness(niceness: int) -> None:
    """The CPU priority of this `ray start`'s session (the node: raylet, agents, Ray's workers) against the other
    sessions: with the kernel's autogroup scheduling (/proc/sys/kernel/sched_autogroup_enabled, on here) each session
    shares the CPU equally and a process's own niceness counts only inside its session. Only root may raise it;
    elsewhere nothing changes."""
    try:
        Path("/proc/self/autogroup").write_text(str(niceness))
    except OSError:
        pass


def main() -> int:
    set_session_niceness(START_NICENESS)  # back to 0 once the node registered
    import ray._private.services as services
    from ray.scripts.scripts import main as ray_main

    register_timeout = float(os.environ.get("NBW_TEST_RAY_REGISTER_S", REGISTER_TIMEOUT))
    services.get_node = patient(services.get_node, register_timeout, raylet_alive,
                                on_found=lambda: set_session_niceness(0))
    sys.argv[0] = "ray"
    return ray_main()


if __name__ == "__main__":
    sys.exit(main())
