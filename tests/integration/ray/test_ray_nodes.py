"""``%%worker --backend ray`` on a multi-node Ray cluster simulated on this machine (this folder's
conftest.py, tests/ray_helpers.py): a head without CPUs on 127.0.0.1 and three worker nodes at 127.0.0.2,
.3 and .4, one CPU each, each its own raylet. Workers on different nodes get their node's own address in
``TF_CONFIG``; a node killed with ``kill -9`` (its raylet's process group) is lost as a machine is, and the
group restarts on the nodes left, from its last checkpoint. The run directory (and the checkpoint in it) is
shared by the nodes, as they are one machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys

import psutil
import pytest
from cells import CHECKSUM, IMPORTS, KERAS_MODEL, SLEEP, worker_cell
from conftest import Kernel, processes_of_run_root, wait_until
from ray_helpers import (
    ACTORS_GONE_TIMEOUT,
    MULTI_NODE_IPS,
    RUN_TIMEOUT,
    WORKERS_UP_TIMEOUT,
    only_pooled_actors_left,
    pooled_actor_pids,
)

from nbworkers.host.command import ZYGOTE_MODULE
from nbworkers.magics.backends.ray.nodes.host_actor import GRANDCHILD_MODULE

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]


def snapshot(kernel, name: str) -> dict:
    return kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()")


def logs(kernel, name: str) -> str:
    return kernel.run(f"%workers logs {name}").stdout


def placements(kernel, name: str) -> list[dict]:
    return kernel.value(f"[{{k: p[k] for k in ('ip', 'port', 'node_id', 'actor_pid')}}"
                        f" for p in nbworkers.get_cluster({name!r}).backend.placements]")


def tf_configs(text: str) -> list[dict]:
    return [json.loads(found) for found in re.findall(r"^TF_CONFIG (.+)$", text, re.M)]


@pytest.mark.node_zygotes  # the others' kernels run without them (conftest.py)
def test_one_worker_on_each_of_three_nodes_and_nothing_left_on_any_node_after_the_kernels_kill_9(
        kernel_env, tmp_path, run_root, ray_cluster):
    """A kernel started with RAY_ADDRESS: %load_ext starts every node's zygote and a spare worker host there
    (groups/prewarm.py, groups/spares.py); the first run places a new group, the spares host its workers (no new
    actor process), each forked; the kernel's kill -9 ends everything on every node."""
    name = "raythree"
    notebook = tmp_path / "prewarmed"
    notebook.mkdir()
    kernel = Kernel(notebook, {**kernel_env, "RAY_ADDRESS": ray_cluster.address, "NBWORKERS_ZYGOTE_PREWARM": "1"},
                    kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    try:
        assert not kernel.run("%load_ext nbworkers\nimport nbworkers").error
        assert wait_until(lambda: len(ray_cluster.actor_processes()) == 3, WORKERS_UP_TIMEOUT, interval=1)
        spares = {proc.pid for proc in ray_cluster.actor_processes()}
        cell = worker_cell(f"-n 3 --backend ray --address {ray_cluster.address} --spread --name {name}",
                           "import tensorflow as tf\n", SLEEP)
        assert not kernel.run(cell).error
        assert wait_until(lambda: logs(kernel, name).count("worker up") == 3, WORKERS_UP_TIMEOUT, interval=1)
        assert sorted(p["ip"] for p in placements(kernel, name)) == sorted(MULTI_NODE_IPS)
        assert {p["actor_pid"] for p in placements(kernel, name)} == spares  # the spares host the workers
        assert {proc.pid for proc in ray_cluster.actor_processes()} == spares  # and no actor process was started
        texts = [(run_root / name / f"worker-{i}.log").read_text() for i in range(3)]
        assert all("forked from zygote" in text for text in texts), texts  # the prewarmed zygotes
        assert len(processes_of_run_root(run_root)) >= 6  # three hosts and three workers
        os.kill(kernel.pid, signal.SIGKILL)  # the Ray driver that owns the actors on every node
    finally:
        kernel.shutdown()
    assert wait_until(lambda: not ray_cluster.actor_processes(), ACTORS_GONE_TIMEOUT), ray_cluster.actor_processes()
    assert wait_until(lambda: not processes_of_run_root(run_root), 30), processes_of_run_root(run_root)
    # the node zygotes go too (their actors belonged to the kernel), and the kernel's own zygote
    assert wait_until(lambda: not processes_of_run_root(run_root, zygotes=True), ACTORS_GONE_TIMEOUT), \
        processes_of_run_root(run_root, zygotes=True)


def node_zygote_pids(run_root) -> set[int]:
    """The zygotes the Ray nodes keep for this test's kernel (magics/backends/ray/nodes/zygote_actor.py): marked with its run root."""
    def node_zygote(proc) -> bool:  # its forked workers carry its command line too, and so does its parent, the
        command = " ".join(proc.cmdline())  # actor's child that makes it a grandchild (procs.grandchild)
        return ZYGOTE_MODULE in command and "nbworkers-ray-zygote" in command and GRANDCHILD_MODULE not in command

    found = set()
    for proc in processes_of_run_root(run_root, zygotes=True):
        try:
            if node_zygote(proc) and not node_zygote(proc.parent()):
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


# A cell that needs TensorFlow: forked, it is imported already (its log says which zygote forked it).
FORK_CELL = worker_cell("-n 3 --backend ray --address {address} --spread --name {name} --block",
                        "import tensorflow as tf\nprint('TF', tf.__version__, flush=True)\n")


@pytest.mark.node_zygotes  # the others' kernels run without them (conftest.py)
def test_one_zygote_per_node_forks_the_workers_of_warm_runs(kernel, run_root, ray_cluster):
    """One worker per node: the cold run spawns each (a new zygote's import beside the worker's own saves nothing)
    and every node's zygote starts when it ends; its actors and placement group are kept, idle; the warm run
    starts its workers through those same actors, each forked from its node's zygote; the kernel's kill -9 ends them
    all, the idle actors too."""
    cold = kernel.run(FORK_CELL.format(address=ray_cluster.address, name="zcold"), timeout=WORKERS_UP_TIMEOUT)
    assert not cold.error, cold.text
    texts = [(run_root / "zcold" / f"worker-{i}.log").read_text() for i in range(3)]
    assert all("this node has no zygote yet" in text for text in texts), texts
    cold_actors = [p["actor_pid"] for p in placements(kernel, "zcold")]
    assert set(cold_actors) == pooled_actor_pids(kernel)  # idle, kept for the next run of this shape
    warm = kernel.run(FORK_CELL.format(address=ray_cluster.address, name="zwarm"), timeout=WORKERS_UP_TIMEOUT)
    assert not warm.error, warm.text
    nodes = [p["node_id"] for p in placements(kernel, "zwarm")]
    assert [p["actor_pid"] for p in placements(kernel, "zwarm")] == cold_actors  # the same live actors
    texts = [(run_root / "zwarm" / f"worker-{i}.log").read_text() for i in range(3)]
    parents = [re.search(r"forked from zygote (\d+)", text) for text in texts]
    assert all(parents), texts
    forked_by = {node: int(found.group(1)) for node, found in zip(nodes, parents)}
    assert len(set(forked_by.values())) == 3, forked_by  # each node's worker from that node's own zygote
    assert set(forked_by.values()) == node_zygote_pids(run_root)
    assert wait_until(lambda: only_pooled_actors_left(kernel, ray_cluster, 3), ACTORS_GONE_TIMEOUT)  # idle again
    os.kill(kernel.pid, signal.SIGKILL)  # the Ray driver that owns the zygotes' and the idle workers' actors
    assert wait_until(lambda: not node_zygote_pids(run_root), ACTORS_GONE_TIMEOUT), node_zygote_pids(run_root)
    assert wait_until(lambda: not ray_cluster.actor_processes(), ACTORS_GONE_TIMEOUT), ray_cluster.actor_processes()


# Elastic: three workers, one per node, at least two. Generation 0 holds after epoch 1 until the test kills worker
# 2's node; with no spare node the group goes on with two (generation 1), which holds after epoch 2 until the
# test starts a node again; the periodic look at the cluster grows it back to three (generation 2), which runs
# epochs 3 and 4. Each change resumes from the last BackupAndRestore checkpoint with a new TF_CONFIG.
ELASTIC_CELL = worker_cell(
    "-n 3 --min-workers 2 --backend ray --address {address} --spread --name {name} --max-restarts 2"
    " --env TF_USE_LEGACY_KERAS=1",
    "import json, time\n", IMPORTS, "from nbworkers import distlib\n\n",
    'generation = os.environ["NBWORKERS_GENERATION"]\n',
    'print("TF_CONFIG", json.dumps(json.loads(os.environ["TF_CONFIG"])), flush=True)\n', KERAS_MODEL, """
class HoldUntilResized(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if (generation, epoch) in (("0", 0), ("1", 1)):
            print("HOLDING GENERATION", generation, flush=True)
            time.sleep(600)

backup = os.path.join(os.environ["NBWORKERS_RUN_DIR"], "backup")
history = model.fit(dataset, epochs=4, steps_per_epoch=4, verbose=2, callbacks=[
    tf.keras.callbacks.BackupAndRestore(backup), distlib.ReportCallback(), HoldUntilResized()])
print("EPOCHS_RUN", len(history.history["loss"]), "GENERATION", generation)
""", CHECKSUM)


def test_an_elastic_group_shrinks_after_a_node_loss_and_grows_back_when_a_node_returns(kernel, run_root, ray_cluster):
    name = "rayelastic"
    kernel.run("import nbworkers; nbworkers.settings().elastic_check_interval = 1.0")
    launched = kernel.run(ELASTIC_CELL.format(address=ray_cluster.address, name=name))
    assert not launched.error, launched.text
    holding = lambda generation: logs(kernel, name).count(f"HOLDING GENERATION {generation}")  # noqa: E731
    assert wait_until(lambda: holding(0) == 3, WORKERS_UP_TIMEOUT, interval=1), logs(kernel, name)
    # --spread: one worker per node, each reached at its own node's address in TF_CONFIG
    first = placements(kernel, name)
    assert sorted(p["ip"] for p in first) == sorted(MULTI_NODE_IPS) and len({p["node_id"] for p in first}) == 3
    addresses = [f"{p['ip']}:{p['port']}" for p in first]
    for index in range(3):
        config = tf_configs((run_root / name / f"worker-{index}.log").read_text())[0]
        assert config["cluster"]["worker"] == addresses and config["task"]["index"] == index, config
    snap = snapshot(kernel, name)
    assert snap["elastic"] == {"min": 2, "max": 3} and len(snap["workers"]) == 3, snap
    # the views show each worker's node: its address and short id
    assert [w["host"] for w in snap["workers"]] == [f"{p['ip']} node {p['node_id'][:8]}" for p in first], snap
    shown = kernel.value(f"__import__('nbworkers.magics.views.summary', fromlist=['_']).render_text("
                         f"nbworkers.get_cluster({name!r}).snapshot())")  # the widget's text/plain
    assert all(f"on {p['ip']} node {p['node_id'][:8]}" in shown for p in first), shown

    lost = first[2]["ip"]
    ray_cluster.kill_node(lost)  # no spare node: the group goes on with the two workers left
    assert wait_until(lambda: holding(1) == 2, RUN_TIMEOUT, interval=1), logs(kernel, name)
    snap = snapshot(kernel, name)
    assert len(snap["workers"]) == 2 and snap["generation"] == 1, snap["restart_history"]
    entry = snap["restart_history"][0]
    assert entry["kind"] == "NodeLost" and entry["workers"] == [3, 2] and lost in entry["cause"], entry
    assert entry["resumed_from"]["epoch"] == 2, entry  # from generation 0's checkpoint of epoch 1
    listing = kernel.run("%workers").displays[-1]["text/plain"]
    assert "2/3 (min 2)" in listing, listing
    asked = kernel.run(f"%workers resize {name}")
    assert "no change: it runs 2 of at most 3 workers and the cluster has room for 2" in asked.stdout, asked.text

    ray_cluster.add_node(lost)  # room again: the next look grows the group back to three
    waited = kernel.run(f"%workers wait {name} --timeout {RUN_TIMEOUT}", timeout=RUN_TIMEOUT + 30)
    assert not waited.error, waited.text
    snap = snapshot(kernel, name)
    assert snap["status"] == "finished" and len(snap["workers"]) == 3, snap["error"]
    grew = snap["restart_history"][1]
    assert grew["kind"] == "CapacityReturned" and grew["workers"] == [2, 3], grew
    assert grew["resumed_from"]["epoch"] == 3, grew
    shown = waited.displays[-1]["text/plain"]
    assert snap["restarts"] == 2 and "3 of 3 workers (elastic, min 2)" in shown, shown
    assert "shrank from 3 to 2 workers" in shown and "grew from 2 to 3 workers" in shown, shown
    texts = [(run_root / name / f"worker-{i}.log").read_text() for i in range(3)]
    assert all(len(tf_configs(t)[-1]["cluster"]["worker"]) == 3 for t in texts), texts  # three again
    assert all("EPOCHS_RUN 2 GENERATION 2" in text for text in texts), texts
    sums = [re.findall(r"CHECKSUM (\S+)", text)[-1] for text in texts]
    assert len(set(sums)) == 1, f"workers ended with different weights: {sums}"
    assert "node lost" in texts[2], texts[2]
    assert kernel.value("'tensorflow' in __import__('sys').modules") is False
    assert wait_until(lambda: not processes_of_run_root(run_root), 30)
    assert wait_until(lambda: only_pooled_actors_left(kernel, ray_cluster, 3), ACTORS_GONE_TIMEOUT), \
        (ray_cluster.actor_processes(), pooled_actor_pids(kernel))


def test_a_session_on_two_nodes_keeps_its_state_and_says_what_a_node_loss_took(kernel, ray_cluster):
    session = f"%%worker --session rn -n 2 --backend ray --address {ray_cluster.address} --spread --block\n"
    cell = "import os\nimport numpy as np\nx = np.arange(1, 5) + int(os.environ['NBWORKERS_WORKER'])\n"
    built = kernel.run(session + cell, timeout=WORKERS_UP_TIMEOUT + 60)
    assert not built.error, built.text
    doubled = kernel.run("%%worker --session rn --block\nx = x * 2\nprint('SUM', int(x.sum()))")
    assert not doubled.error and "SUM 20" in doubled.stdout and "SUM 28" in doubled.stdout, doubled.text
    assert kernel.value("nbworkers.session('rn').pull('x', worker=1).tolist()") == [4, 6, 8, 10]
    first = placements(kernel, "rn")
    assert len({p["node_id"] for p in first}) == 2, first

    lost = first[1]["ip"]
    ray_cluster.kill_node(lost)  # the session's processes restart on the nodes left (a spare one is there)
    assert wait_until(lambda: kernel.value("nbworkers.session('rn').restarts") == 1, RUN_TIMEOUT, interval=1)
    entry = snapshot(kernel, "rn")["restart_history"][0]
    assert entry["kind"] == "NodeLost" and lost in entry["cause"], entry
    # named by the notebook's numbers (issue 43): the two cells' [N]
    assert f"the state of cells [{built.execution_count}] and [{doubled.execution_count}] is gone" in kernel.value(
        "nbworkers.session('rn').lost_note")
    after = kernel.run("%%worker --session rn --block\nprint('KEPT', 'x' in globals())",
                       timeout=WORKERS_UP_TIMEOUT + 60)
    assert not after.error and "KEPT False" in after.stdout, after.text
    assert kernel.value("nbworkers.session('rn').pull('6 * 7', worker=1)") == 42
    assert lost not in {p["ip"] for p in placements(kernel, "rn")}
    kernel.run("%workers stop rn")
    ray_cluster.add_node(lost)  # the cluster as it was, for the next test
