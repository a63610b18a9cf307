"""tests/ray_cli.py's patient get_node: Ray's node start sees a raylet that registers after Ray's fixed 30 s."""

from __future__ import annotations

import pytest
from ray_cli import RayletExited, patient


def test_a_node_that_registers_late_is_found_and_one_that_never_does_fails_with_rays_error():
    calls = []

    def get_node(address, node_id):
        calls.append((address, node_id))
        if len(calls) < 3:
            raise RuntimeError("node not found")
        return {"node_id": node_id}

    found = []
    wait = patient(get_node, timeout=5, raylet_alive=lambda: True, on_found=lambda: found.append(1), interval=0)
    assert wait("gcs:1", "n1") == {"node_id": "n1"}
    assert calls == [("gcs:1", "n1")] * 3
    assert found == [1]

    def never(address, node_id):
        raise RuntimeError("node not found")

    with pytest.raises(RuntimeError, match="node not found"):
        patient(never, timeout=0, raylet_alive=lambda: True, interval=0)("gcs:1", "n1")


def test_a_raylet_that_exited_is_reported_at_once():
    asked = []

    def never(address, node_id):
        asked.append(node_id)
        raise RuntimeError("node not found")

    with pytest.raises(RayletExited, match="the raylet exited before it registered"):
        patient(never, timeout=3600, raylet_alive=lambda: False, interval=0)("gcs:1", "n1")
    assert asked == ["n1"]
