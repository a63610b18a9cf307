"""Ray with TLS, the recipe of docs/ray.md ("Ray with TLS") run for real: its own script (read from the page) makes a
CA and a node certificate, a head and one node start on this machine with the four variables it writes, and a
``%%worker --backend ray`` cell runs through them from a kernel that has them too. The run records ``ray_tls: on``
(state.json, ``%workers``) and its cell says Ray runs with TLS, with no plain-text warning.

A cluster of its own (the shared one of conftest.py has no TLS), as small as the recipe allows: a head without CPUs
and one node at an address the shared cluster does not use."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import psutil
import pytest
from conftest import processes_of_run_root, wait_until
from ray_helpers import RayTestCluster, needs_ray

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900), needs_ray]

DOCS = Path(__file__).resolve().parents[3] / "docs" / "ray.md"
TLS_NODE_IP = "127.0.0.5"  # not one of the shared cluster's (ray_helpers.MULTI_NODE_IPS)
CELL = """%%worker -n 1 --backend ray --address {address} --name raytls --block
import os
print("TLS", os.environ.get("RAY_USE_TLS"), flush=True)
"""


def recipe_script() -> str:
    found = re.search(r"<!-- ray-tls-recipe -->\n```bash\n(.*?)```\n<!-- /ray-tls-recipe -->", DOCS.read_text(), re.S)
    assert found, "docs/ray.md lost its recipe (the bash block between the ray-tls-recipe markers)"
    return found.group(1)


def this_machines_addresses() -> list[str]:
    """Every IPv4 address of this machine: Ray's head reaches its own GCS at the address it picks (not 127.0.0.1),
    and each TLS peer checks the other's certificate names the address it dialled."""
    return sorted({a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family == socket.AF_INET})


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("ray-tls")
    script = base / "make-ray-tls.sh"
    script.write_text(recipe_script())
    made = subprocess.run(["bash", str(script), str(base / "certs"), *this_machines_addresses(), TLS_NODE_IP],
                          capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    assert (base / "certs").stat().st_mode & 0o777 == 0o700
    env = dict(re.findall(r"^export (\w+)=(.*)$", (base / "certs" / "env.sh").read_text(), re.M))
    assert sorted(env) == ["RAY_TLS_CA_CERT", "RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_USE_TLS"], env
    cluster = RayTestCluster((TLS_NODE_IP,), head_cpus=0, env=env)
    try:
        yield cluster.start(), env
    finally:
        cluster.stop()
        assert not cluster.session_processes(), "Ray processes outlived the TLS cluster"


@pytest.fixture
def tls_kernel_env(kernel_env, tls_cluster):
    kernel_env.update(tls_cluster[1])  # the kernel is a Ray driver: it needs the four variables too
    return kernel_env


def test_a_cell_runs_through_a_tls_cluster_and_says_so_without_the_plain_text_warning(tls_kernel_env, kernel,
                                                                                      run_root, tls_cluster):
    cluster, _ = tls_cluster
    ran = kernel.run(CELL.format(address=cluster.address))
    assert not ran.error, ran.text
    assert "Ray runs with TLS here" in ran.text and "not encrypted" not in ran.text, ran.text
    snap = kernel.value("nbworkers.get_cluster('raytls').snapshot()")
    assert snap["status"] == "finished", snap["error"]
    assert any(line.startswith("TLS 1") for line in snap["workers"][0]["log_tail"]), snap["workers"][0]["log_tail"]
    assert snap["isolation"]["ray_tls"] == "on"
    assert json.loads((run_root / "raytls" / "state.json").read_text())["isolation"]["ray_tls"] == "on"
    listing = kernel.run("%workers")
    assert "Ray's TLS: on" in listing.text, listing.text
    assert wait_until(lambda: not processes_of_run_root(run_root), 30)
