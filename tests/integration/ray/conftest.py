"""The Ray tests' one cluster, started once for this folder and stopped after it (idle raylets would cost the
rest of the suite CPU): the simulated multi-node cluster of tests/ray_helpers.py (``running_cluster(MULTI_NODE_IPS)``),
a head without CPUs on 127.0.0.1 and three worker nodes at 127.0.0.2, .3 and .4, one CPU each.

Tests take ``ray_cluster``: the cluster with every worker node up (a node a test killed and did not start again,
as when it failed half-way, is started again first, so that one failure does not become many). Their kernels run
without zygotes (``NBWORKERS_ZYGOTE=0``) unless a test is marked ``node_zygotes``."""

from __future__ import annotations

import pytest
from ray_helpers import MULTI_NODE_IPS, RAY_TEST_ENV, RayTestCluster, running_cluster

ZYGOTES_MARK = "node_zygotes"


@pytest.fixture(autouse=True)
def ray_test_environment(request: pytest.FixtureRequest, kernel_env):
    """The test kernel (the Ray driver) sees the same Ray settings as the test cluster; without node zygotes but in
    the tests marked ``node_zygotes``. A cold run spawns its one worker per node anyway (node_zygotes.py) and starts
    each node's zygote when it ends, for the kernel's next runs: an actor process and a TensorFlow import per node
    (~10 s of CPU each, where `make test` is CPU-bound), wasted when the kernel ends with the test."""
    kernel_env.update(RAY_TEST_ENV)
    if request.node.get_closest_marker(ZYGOTES_MARK) is None:
        kernel_env["NBWORKERS_ZYGOTE"] = "0"


@pytest.fixture(scope="package")
def ray_cluster_once():
    yield from running_cluster(MULTI_NODE_IPS)


@pytest.fixture
def ray_cluster(ray_cluster_once: RayTestCluster) -> RayTestCluster:
    for ip in MULTI_NODE_IPS:
        if ip not in ray_cluster_once.nodes:
            ray_cluster_once.add_node(ip)
    return ray_cluster_once
