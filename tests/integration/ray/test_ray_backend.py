"""``%%worker --backend ray`` on a real Ray cluster started on this machine.

The cluster is this folder's (conftest.py): a head without CPUs and three worker nodes on loopback addresses, one
CPU each, each ``ray start --block`` in a session of its own. ``--spread`` puts one worker on each node. The tests
that need Ray are skipped, saying so, when it is not installed (the ``ray`` extra); the checks of the errors a user
without Ray sees always run.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
from pathlib import Path

import psutil
import pytest
from cells import CHECKSUM, IMPORTS, KERAS_MODEL, KILLABLE, LOOP_WITH_FINALLY, SLEEP, worker_cell
from conftest import processes_of_run_root, wait_until
from ray_helpers import (
    ACTORS_GONE_TIMEOUT,
    RUN_TIMEOUT,
    WORKERS_UP_TIMEOUT,
    free_port,
    needs_ray,
    only_pooled_actors_left,
    pooled_actor_pids,
)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900), pytest.mark.share_kernel]  # tests/shared_kernel.py


# Two workers, one per node, train a tf_keras model under MWMS on different data. Generation 0 holds after
# epoch 2 (its checkpoint written by BackupAndRestore) until the test kills worker 1; the restarted group
# resumes from that checkpoint and runs epochs 3 and 4.
TRAIN_CELL = worker_cell(
    "-n 2 --backend ray --address {address} --spread --name {name} --max-restarts 2 --env TF_USE_LEGACY_KERAS=1",
    "import time\n", IMPORTS, "from nbworkers import distlib\n\n",
    'generation = os.environ["NBWORKERS_GENERATION"]\n', KERAS_MODEL, """
class HoldUntilKilled(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if generation == "0" and epoch == 1:
            print("HOLDING", flush=True)
            time.sleep(600)

backup = os.path.join(os.environ["NBWORKERS_RUN_DIR"], "backup")
history = model.fit(dataset, epochs=4, steps_per_epoch=4, verbose=2, callbacks=[
    tf.keras.callbacks.BackupAndRestore(backup), distlib.ReportCallback(), HoldUntilKilled()])
print("EPOCHS_RUN", len(history.history["loss"]), "GENERATION", generation)
""", CHECKSUM)

SLEEP_CELL = worker_cell("-n 2 --backend ray --address {address} --name {name}", SLEEP)

def snapshot(kernel, name: str) -> dict:
    return kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()")


def logs(kernel, name: str) -> str:
    return kernel.run(f"%workers logs {name}").stdout


def test_training_on_two_ray_nodes_survives_a_killed_worker(kernel, run_root, ray_cluster):
    name = "raytrain"
    launched = kernel.run(TRAIN_CELL.format(address=ray_cluster.address, name=name))
    assert not launched.error, launched.text
    assert wait_until(lambda: logs(kernel, name).count("HOLDING") == 2, WORKERS_UP_TIMEOUT, interval=1), logs(kernel, name)
    snap = snapshot(kernel, name)
    assert snap["backend"] == "ray" and snap["status"] == "running", snap
    # metrics reached the kernel over the relay, from both nodes
    assert all(w["metrics"].get("loss") is not None for w in snap["workers"]), snap["workers"]
    nodes = kernel.value(f"[p['node_id'] for p in nbworkers.get_cluster({name!r}).backend.placements]")
    assert len(set(nodes)) == 2, "--spread should put the two workers on different Ray nodes"
    victim = snap["workers"][1]["pid"]
    assert victim and psutil.pid_exists(victim)
    os.kill(victim, signal.SIGKILL)  # the worker's process on its Ray node

    waited = kernel.run(f"%workers wait {name} --timeout {RUN_TIMEOUT}", timeout=RUN_TIMEOUT + 30)
    assert not waited.error, waited.text
    snap = snapshot(kernel, name)
    assert snap["status"] == "finished", snap["error"]
    assert snap["restarts"] == 1 and snap["generation"] == 1
    entry = snap["restart_history"][0]
    assert entry["kind"] == "WorkerCrashed" and entry["worker"] == 1, entry
    assert all(w["pid"] != victim for w in snap["workers"])
    texts = [(run_root / name / f"worker-{i}.log").read_text() for i in range(2)]
    sums = [re.findall(r"CHECKSUM (\S+)", text) for text in texts]
    assert all(len(s) == 1 for s in sums), texts
    assert sums[0] == sums[1], f"workers ended with different weights: {sums}"
    # the restarted group resumed from the checkpoint of epoch 2: it ran the last two epochs only
    assert all("EPOCHS_RUN 2 GENERATION 1" in text for text in texts), texts
    assert all("on Ray node" in text for text in texts)
    assert kernel.value("'tensorflow' in __import__('sys').modules") is False
    assert wait_until(lambda: not processes_of_run_root(run_root), 30)
    # the group's actors (generation 1 restarted through them) are kept idle for the next run of this shape
    assert wait_until(lambda: only_pooled_actors_left(kernel, ray_cluster, 2), ACTORS_GONE_TIMEOUT), \
        (ray_cluster.actor_processes(), pooled_actor_pids(kernel))


QUICK_CELL = """%%worker -n 2 --backend ray --address {address} --name {name} --block
print("hello from", __import__("socket").gethostname(), flush=True)
"""


@pytest.mark.own_kernel  # a kernel's first Ray run says what Ray does not encrypt; then it patches the Ray backend
def test_any_spelling_of_the_head_works_the_relay_is_encrypted_and_a_stop_with_unshared_logs_leaves_nothing(
        kernel, run_root, ray_cluster):
    """Two checks that each need a kernel of their own, in one (a kernel's first Ray run pays its connection and its
    actor processes).

    Hardening: connected under the address Ray printed (this machine's LAN IP), the kernel takes 127.0.0.1:PORT,
    localhost:PORT and auto for the same head; another head is refused clearly. The run's relay is a CurveZMQ
    server (the log lines in the kernel came through it). Connecting leaves the kernel's SIGTERM handling alone.

    Stop: the node is then made to believe it does not see the kernel's files (as on another machine without a
    shared file system): the cell is copied to the node, the log written there and copied back; the stop leaves no
    worker or actor process but the run's group, idle (the one the first runs left in the pool, taken again)."""
    sigterm = "repr(__import__('signal').getsignal(__import__('signal').SIGTERM))"
    kernel_sigterm = kernel.value(sigterm)  # before the kernel's first connection to Ray
    port = ray_cluster.address.rsplit(":", 1)[1]
    first = kernel.run(QUICK_CELL.format(address=ray_cluster.address, name="rayfirst"))
    assert not first.error, first.text
    assert kernel.value(sigterm) == kernel_sigterm, "connecting to Ray changed the kernel's SIGTERM handling"
    # this cluster has no TLS: the kernel's first Ray run says what crosses in plain text (once: not the second)
    assert first.text.count("Ray's transport is not encrypted") == 1 and "RAY_USE_TLS=1" in first.text, first.text
    second = kernel.run(QUICK_CELL.format(address=f"127.0.0.1:{port}", name="raysecond"))
    assert not second.error and "already connected" not in second.text, second.text
    assert "not encrypted" not in second.text
    for name in ("rayfirst", "raysecond"):
        snap = kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()")
        assert snap["status"] == "finished", snap["error"]
        assert all(any("hello from" in line for line in w["log_tail"]) for w in snap["workers"]), snap["workers"]
    encrypted = kernel.value("nbworkers.get_cluster('raysecond').relay.curve is not None")
    assert encrypted
    other = free_port()
    checks = kernel.run(
        "from nbworkers.magics.backends.ray.backend import RayBackend, RayBackendError\n"
        f"for address in ['localhost:{port}', 'auto', '127.0.0.1:{port}']:\n"
        "    RayBackend(address=address).connect()\n"
        "try:\n"
        f"    RayBackend(address='127.0.0.1:{other}').connect()\n"
        "except RayBackendError as error:\n"
        "    print('REFUSED', error)\n")
    assert not checks.error, checks.error
    assert "REFUSED --address 127.0.0.1:" in checks.stdout and "another Ray cluster" in checks.stdout, checks.stdout
    assert wait_until(lambda: not processes_of_run_root(run_root), 30)

    name = "raystop"
    node_dirs = Path(tempfile.gettempdir()) / f"nbworkers-ray-{os.getuid()}"  # private to this user (private_dirs)
    node_prefix = node_dirs / f"{name}-"
    forced = kernel.run("import nbworkers.magics.backends.ray.backend as rb; rb.log_probe = lambda path: (-1, b'')")
    assert not forced.error, forced.error
    try:
        assert not kernel.run(SLEEP_CELL.format(address=ray_cluster.address, name=name)).error
        assert wait_until(lambda: logs(kernel, name).count("worker up") == 2, WORKERS_UP_TIMEOUT, interval=1)
        shown = logs(kernel, name)
        assert shown.count(f"log there: {node_prefix}") == 2 and shown.count("(copied here)") == 2, shown
        assert len(ray_cluster.actor_processes()) == 2
        assert kernel.value(sigterm) == kernel_sigterm, "running on Ray changed the kernel's SIGTERM handling"
        assert len(processes_of_run_root(node_prefix)) >= 4  # hosts and workers run in the node's directory
        stopped = kernel.run(f"%workers stop {name}")
        assert not stopped.error, stopped.text
        assert kernel.value(f"nbworkers.get_cluster({name!r}).status") == "stopped"
        assert wait_until(lambda: not processes_of_run_root(node_prefix), 30), processes_of_run_root(node_prefix)
        assert not processes_of_run_root(run_root)
        assert only_pooled_actors_left(kernel, ray_cluster, 2), ray_cluster.actor_processes()  # idle: no worker
        released = kernel.run("%workers stop --all")  # lets the idle groups go too
        assert "Released 1 idle Ray worker group" in released.stdout, released.text
        assert wait_until(lambda: not ray_cluster.actor_processes(), ACTORS_GONE_TIMEOUT), ray_cluster.actor_processes()
    finally:
        for path in node_dirs.glob(f"{name}-*"):
            shutil.rmtree(path, ignore_errors=True)
        try:
            node_dirs.rmdir()  # only when empty: another run may use it
        except OSError:
            pass


OPEN_CWD_CELL = """%%worker -n 2 --backend ray --address {address} --name {name} --block
import importlib.util, os, sys
print("CWD", os.getcwd(), "PLANTED", importlib.util.find_spec("planted_here") is not None, flush=True)
"""


def test_a_working_directory_others_may_write_is_not_used_on_the_nodes_and_the_cell_says_so(
        kernel, run_root, ray_cluster, tmp_path):
    """The kernel's working directory, world-writable (as a shared scratch folder): on every node the worker runs
    in the run's private directory instead, never imports a module planted there, and the cell says why."""
    shared = tmp_path / "scratch"
    shared.mkdir()
    (shared / "planted_here.py").write_text("raise SystemExit('imported a planted module')\n")
    shared.chmod(0o777)
    moved = kernel.run(f"import os; _before = os.getcwd(); os.chdir({str(shared)!r})")
    assert not moved.error, moved.error
    try:
        ran = kernel.run(OPEN_CWD_CELL.format(address=ray_cluster.address, name="rayopencwd"))
    finally:
        kernel.run("os.chdir(_before)")
    assert not ran.error, ran.text
    assert ran.text.count("may be written by other users") >= 2 and "chmod go-w" in ran.text, ran.text
    snap = kernel.value("nbworkers.get_cluster('rayopencwd').snapshot()")
    assert snap["status"] == "finished", snap["error"]
    lines = [line for w in snap["workers"] for line in w["log_tail"] if line.startswith("CWD")]
    assert len(lines) == 2 and all(f"CWD {shared} " not in line and line.endswith("PLANTED False")
                                   for line in lines), lines
    assert wait_until(lambda: not processes_of_run_root(run_root), 30)


# The kernel's kill -9 ending every actor and process: test_ray_nodes.py (three nodes, node zygotes too).


@needs_ray
@pytest.mark.own_kernel  # a kernel connected to Ray refuses another address before it tries it
def test_an_address_that_does_not_answer_starts_nothing(kernel, run_root):
    closed = free_port()
    result = kernel.run(f"%%worker -n 2 --backend ray --address 127.0.0.1:{closed} --name unreachable\nprint('hi')\n")
    assert f"127.0.0.1:{closed}: nothing answers there" in result.failure, result.text
    assert "Nothing was started" in result.failure
    assert not (run_root / "unreachable").exists()
    assert not processes_of_run_root(run_root)


def test_ray_flags_need_the_ray_backend(kernel):
    result = kernel.run("%%worker -n 2 --spread --address 1.2.3.4:6379\nprint('hi')\n")
    assert "--address, --spread: only for the Ray backend. Add --backend ray." in result.failure, result.text


@pytest.fixture
def kernel_without_ray(kernel_env, tmp_path):
    """The kernel's environment with a `ray` package that fails to import, as when Ray is not installed."""
    fake = tmp_path / "no-ray"
    (fake / "ray").mkdir(parents=True)
    (fake / "ray" / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    kernel_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(fake), kernel_env.get("PYTHONPATH", "")]))


@pytest.mark.own_kernel  # its kernel's environment has no Ray
def test_missing_ray_says_how_to_install_it(kernel_without_ray, kernel, run_root):
    result = kernel.run("%%worker -n 2 --backend ray --name noray\nprint('hi')\n")
    assert 'pip install "nbworkers[ray]"' in result.failure, result.text
    assert not (run_root / "noray").exists()


def test_a_group_ray_cannot_place_says_why_and_leaves_nothing(kernel, run_root, ray_cluster):
    configured = kernel.run("nbworkers.settings().config.RaySettings.placement_timeout = 5")
    assert not configured.error, configured.error
    try:  # four workers, one per node, on three nodes with CPUs
        result = kernel.run(f"%%worker -n 4 --backend ray --address {ray_cluster.address} --spread --name crowded\n"
                            "print('hi')\n")
    finally:  # settings().config is the kernel's IPython config, which the shared kernel's reset does not give back
        restored = kernel.run("del nbworkers.settings().config.RaySettings['placement_timeout']")
    assert not restored.error, restored.error
    assert "Ray could not place 4 workers with 1 CPU each on separate nodes (--spread)" in result.failure, result.text
    assert "the cluster has 4 node(s)" in result.failure and "Nothing was started" in result.failure
    assert not processes_of_run_root(run_root)
    assert wait_until(lambda: not ray_cluster.actor_processes(), ACTORS_GONE_TIMEOUT)


# Generation 0 waits to be killed; the restarted generation finishes.
KILLABLE_CELL = worker_cell("-n 2 --backend ray --address {address} --name {name} --max-restarts 1", KILLABLE)


def test_a_dead_actor_is_a_crash_and_the_group_restarts(kernel, run_root, ray_cluster):
    """As when a node goes away: the actor hosting worker 0 dies; its host stops the worker; the group restarts."""
    name = "rayactor"
    assert not kernel.run(KILLABLE_CELL.format(address=ray_cluster.address, name=name)).error
    assert wait_until(lambda: logs(kernel, name).count("generation 0") == 2, WORKERS_UP_TIMEOUT, interval=1)
    actor_pid = kernel.value(f"nbworkers.get_cluster({name!r}).backend.placements[0]['actor_pid']")
    assert actor_pid in [p.pid for p in ray_cluster.actor_processes()]
    os.kill(actor_pid, signal.SIGKILL)
    waited = kernel.run(f"%workers wait {name} --timeout {RUN_TIMEOUT}", timeout=RUN_TIMEOUT + 30)
    assert not waited.error, waited.text
    snap = snapshot(kernel, name)
    assert snap["status"] == "finished", snap["error"]
    assert snap["restarts"] == 1 and snap["restart_history"][0]["worker"] == 0, snap["restart_history"]
    text = (run_root / name / "worker-0.log").read_text()
    assert "the Ray actor hosting worker 0" in text and "died" in text, text
    assert logs(kernel, name).count("done") == 2
    assert wait_until(lambda: not processes_of_run_root(run_root), 30)
    # the dead actor's group was released, not pooled: only the restarted group's two actors are left, idle
    assert actor_pid not in pooled_actor_pids(kernel)
    assert wait_until(lambda: only_pooled_actors_left(kernel, ray_cluster, 2), ACTORS_GONE_TIMEOUT), \
        (ray_cluster.actor_processes(), pooled_actor_pids(kernel))


def test_an_actor_ray_ends_leaves_its_host_to_stop_the_worker_with_its_finally(kernel, run_root, ray_cluster,
                                                                             tmp_path):
    """An exiting Ray worker process SIGKILLs its direct children (``ray.kill`` here; the kernel's death and a
    group's release end actors the same way). The worker's host is the actor's grandchild (procs/grandchild.py), so
    it outlives the actor, sees its pipe close and stops the worker as a Stop does: the cell's ``finally:`` runs."""
    name = "rayended"
    marker = str(tmp_path / "ended")
    cell = worker_cell(f"-n 1 --backend ray --address {ray_cluster.address} --name {name}",
                       LOOP_WITH_FINALLY.format(marker=marker, setup="", body="pass"))
    assert not kernel.run(cell).error
    assert wait_until(lambda: "worker up" in logs(kernel, name), WORKERS_UP_TIMEOUT, interval=1)
    ended = kernel.run(f"import ray\nray.kill(nbworkers.get_cluster({name!r}).backend._group.actors[0])")
    assert not ended.error, ended.text
    assert wait_until(lambda: os.path.exists(f"{marker}-finally-0"), 60), logs(kernel, name)
    assert wait_until(lambda: logs(kernel, name).count("worker up") == 2, WORKERS_UP_TIMEOUT, interval=1)  # restarted
    assert not kernel.run(f"%workers stop {name}").error
    assert wait_until(lambda: not processes_of_run_root(run_root), 30), processes_of_run_root(run_root)
