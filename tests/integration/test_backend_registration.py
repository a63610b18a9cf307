"""Backends by registration (magics/backends/registry.py): a fake backend from the tests folder (tests/fake_backend.py),
registered in a real kernel, runs a ``%%worker`` cell to its end. Nothing of magics/ knows it: its flag, its check,
its node labels and its isolation fact all come through the registration and the ``Backend`` protocol."""

from __future__ import annotations

import json
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REGISTER = (f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nimport fake_backend\n"
            "from nbworkers.magics.backends import registry\nregistry.register(fake_backend.FAKE)\n")
CELL = ("%%worker -n 2 --backend fake --fake-node rack7 --block --name viafake\n"
        "import json, os\n"
        "print('FAKE WORKER', json.loads(os.environ['TF_CONFIG'])['task']['index'])\n")


def test_a_backend_registered_from_the_tests_folder_runs_a_cell_to_its_end(kernel, run_root):
    registered = kernel.run(REGISTER)
    assert not registered.error, registered.error
    usage = " ".join(kernel.run("%%worker --help\n").stdout.split())
    assert "fake backend of the tests" in usage and "--backend fake:" in usage and "--fake-node NAME" in usage, usage

    refused = kernel.run("%%worker -n 1 --fake-node rack7\nprint(1)\n")  # its flag, with the default backend
    assert "--fake-node: only for the fake backend. Add --backend fake." in refused.stderr, refused
    refused = kernel.run("%%worker -n 1 --backend fake --fake-node 'two words'\nprint(1)\n")  # its own check
    assert "give a name without spaces" in refused.stderr, refused
    refused = kernel.run("%%worker -n 1 --backend fake --detach\nprint(1)\n")  # it cannot detach
    assert "--detach: not with --backend fake (local, Ray and Slurm only)" in refused.stderr, refused

    ran = kernel.run(CELL)
    assert not ran.error, ran.error
    snapshot = kernel.value("nbworkers.get_cluster('viafake').snapshot()")
    assert snapshot["status"] == "finished" and snapshot["backend"] == "fake", snapshot
    assert [w["status"] for w in snapshot["workers"]] == ["finished", "finished"], snapshot["workers"]
    assert [w["host"] for w in snapshot["workers"]] == ["rack7-0", "rack7-1"]  # its handles' node labels
    for index in range(2):
        log = (run_root / "viafake" / f"worker-{index}.log").read_text()
        assert f"FAKE WORKER {index}" in log, log
    state = json.loads((run_root / "viafake" / "state.json").read_text())
    assert state["isolation"] == {"mode": "off", "reason": "the fake backend makes no private network namespace"}
    assert kernel.value("nbworkers.get_cluster('viafake').backend.launched") == [0, 1]
