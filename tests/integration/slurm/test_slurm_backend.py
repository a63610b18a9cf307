"""``%%worker --backend slurm`` inside a two-node allocation of the test Slurm (this folder's conftest.py: munged,
slurmctld and ``slurmd -N n1`` / ``-N n2`` on 127.0.0.1). The kernel runs as inside ``salloc``: ``SLURM_CONF``,
``SLURM_JOB_ID`` and ``SLURM_JOB_NODELIST`` in its environment (and ``SLURM_NTASKS``, which the workers' steps must
not inherit). Nodes are told apart by ``SLURMD_NODENAME``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from cells import CHECKSUM, IMPORTS, KERAS_MODEL, LOOP_WITH_FINALLY, worker_cell
from conftest import wait_until

from nbworkers.magics.backends.slurm import commands

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

RUN_TIMEOUT = 300  # s for the training to end, its restart included (TensorFlow's imports on a busy machine)
UP_TIMEOUT = 120  # s for both workers to be up
QUEUED_LOOKS = 3.0  # s: three of --submit's looks at its queued job (SlurmSettings.queued_poll_interval)
STEPS_GONE_TIMEOUT = 20  # s for every worker's step to leave Slurm's list after a stop or the kernel's end

# The tutorial's model, one worker on each node (in turn over n1, n2). Generation 0 holds after epoch 2 (its
# checkpoint written by BackupAndRestore) until the test cancels worker 1's step; the restarted group resumes from
# that checkpoint and runs epochs 3 and 4.
TRAIN_CELL = worker_cell(
    "-n 2 --backend slurm --name {name} --max-restarts 2 --env TF_USE_LEGACY_KERAS=1",
    "import time\n", IMPORTS, "from nbworkers import distlib\n\n",
    'generation = os.environ["NBWORKERS_GENERATION"]\n',
    'print("ON NODE", os.environ["SLURMD_NODENAME"], "STEP", os.environ["SLURM_STEP_ID"], flush=True)\n',
    KERAS_MODEL, """
class HoldUntilCancelled(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if generation == "0" and epoch == 1:
            print("HOLDING", flush=True)
            time.sleep(600)

backup = os.path.join(os.environ["NBWORKERS_RUN_DIR"], "backup")
history = model.fit(dataset, epochs=4, steps_per_epoch=4, verbose=2, callbacks=[
    tf.keras.callbacks.BackupAndRestore(backup), distlib.ReportCallback(), HoldUntilCancelled()])
print("EPOCHS_RUN", len(history.history["loss"]), "GENERATION", generation)
""", CHECKSUM)


@pytest.fixture
def allocation(slurm_cluster, kernel_env, slurm_test_environment) -> dict[str, str]:
    """A two-node allocation (``salloc -N2 --no-shell``), cancelled after the test (before conftest.py looks for jobs
    left): its variables, as a kernel inside it has them, are in ``kernel_env`` (a test asks for it before
    ``kernel``)."""
    granted = slurm_cluster.client("salloc", "-N2", "--no-shell", "-J", "nbw-kernel", "--time=30", timeout=60)
    found = re.search(r"Granted job allocation (\d+)", granted.stderr)
    assert found, granted
    job = found.group(1)
    nodelist = slurm_cluster.client("squeue", "-h", "-j", job, "-o", "%N").stdout.strip()
    variables = {"SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": nodelist, "SLURM_NNODES": "2", "SLURM_NTASKS": "2"}
    kernel_env.update(variables)
    yield variables
    slurm_cluster.client("scancel", job)


def steps(slurm_cluster, job: str) -> list[str]:
    """The job's worker steps Slurm still has (``squeue -s``): ``JOB.STEP NAME`` each."""
    listed = slurm_cluster.client("squeue", "-h", "-s", "-j", job, "-o", "%i %j").stdout.splitlines()
    return [line for line in listed if line.split()[-1].startswith(commands.STEP_NAME_PREFIX)]


def zygote_steps(slurm_cluster, job: str) -> list[str]:
    """The job's zygote steps (one per node: ``zygote_steps.py``) Slurm still has."""
    listed = slurm_cluster.client("squeue", "-h", "-s", "-j", job, "-o", "%i %j").stdout.splitlines()
    return [line for line in listed if line.split()[-1].startswith(commands.ZYGOTE_STEP_PREFIX)]


def logs(run_root, name: str) -> list[str]:
    return [(run_root / name / f"worker-{i}.log").read_text() for i in range(2)]


@pytest.mark.node_zygotes  # a TensorFlow import per node, then forks, the restart's too (spawned: one per worker)
def test_training_on_two_slurm_nodes_resumes_after_a_cancelled_step_and_leaves_no_step(
        allocation, kernel, run_root, slurm_cluster):
    name, job = "slurmtrain", allocation["SLURM_JOB_ID"]
    started = time.monotonic()
    launched = kernel.run(TRAIN_CELL.format(name=name))
    assert not launched.error and not launched.stderr, launched.text
    assert wait_until(lambda: "".join(logs(run_root, name)).count("HOLDING") == 2, UP_TIMEOUT, interval=1), \
        logs(run_root, name)
    texts = logs(run_root, name)
    assert "ON NODE n1" in texts[0] and "ON NODE n2" in texts[1], texts
    snap = kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()")
    assert snap["backend"] == "slurm" and [w["host"] for w in snap["workers"]] == ["n1", "n2"], snap["workers"]
    assert all(w["metrics"].get("loss") is not None for w in snap["workers"]), snap["workers"]  # over the relay
    running = steps(slurm_cluster, job)
    assert len(running) == 2, running
    victim = next(line.split()[0] for line in running if line.endswith("-g0-w1"))
    print(f"{time.monotonic() - started:.1f} s: both workers holding after epoch 2")
    cancelled = slurm_cluster.client("scancel", victim)  # worker 1's step: SIGKILL to its task on n2
    assert cancelled.returncode == 0, cancelled

    waited = kernel.run(f"%workers wait {name} --timeout {RUN_TIMEOUT}", timeout=RUN_TIMEOUT + 30)
    assert not waited.error, waited.text
    print(f"{time.monotonic() - started:.1f} s: the restarted group finished")
    snap = kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()")
    assert snap["status"] == "finished", snap["error"]
    assert snap["restarts"] == 1 and snap["generation"] == 1, snap["restart_history"]
    entry = snap["restart_history"][0]
    assert entry["kind"] == "NodeLost" and entry["worker"] == 1 and "was cancelled" in entry["cause"], entry
    texts = logs(run_root, name)
    sums = [re.findall(r"CHECKSUM (\S+)", text) for text in texts]
    assert all(len(s) == 1 for s in sums) and sums[0] == sums[1], f"different weights or none: {sums}"
    # the restarted group resumed from the checkpoint of epoch 2: it ran the last two epochs only
    assert all("EPOCHS_RUN 2 GENERATION 1" in text for text in texts), texts
    assert "ON NODE n1" in texts[0].split("launch 1")[-1] and "ON NODE n2" in texts[1].split("launch 1")[-1]
    assert wait_until(lambda: not steps(slurm_cluster, job), STEPS_GONE_TIMEOUT), steps(slurm_cluster, job)
    assert kernel.value("'tensorflow' in __import__('sys').modules") is False


@pytest.mark.own_kernel  # it kills its kernel
@pytest.mark.node_zygotes  # the zygote steps too must end with it
def test_stop_runs_finally_and_the_kernels_kill_9_leaves_no_step(allocation, kernel, run_root, slurm_cluster, tmp_path):
    job = allocation["SLURM_JOB_ID"]
    marker = str(tmp_path / "mark")
    def cell(name: str, mark: str) -> str:
        return worker_cell(f"-n 2 --backend slurm --spread --name {name}",
                           LOOP_WITH_FINALLY.format(setup="", marker=mark, body="pass"))

    assert not kernel.run(cell("slurmstop", marker)).error
    assert wait_until(lambda: "".join(logs(run_root, "slurmstop")).count("worker up") == 2, UP_TIMEOUT, interval=0.5)
    assert len(steps(slurm_cluster, job)) == 2
    stopped = kernel.run("%workers stop slurmstop")
    assert not stopped.error, stopped.text
    assert kernel.value("nbworkers.get_cluster('slurmstop').status") == "stopped"
    for index in range(2):  # SIGINT first: the cell's finally: and atexit ran on both nodes
        assert os.path.exists(f"{marker}-finally-{index}") and os.path.exists(f"{marker}-atexit-{index}"), index
    assert wait_until(lambda: not steps(slurm_cluster, job), STEPS_GONE_TIMEOUT), steps(slurm_cluster, job)

    # the warm path: the first run started one zygote step per node; this run's workers are forked there
    zygotes = zygote_steps(slurm_cluster, job)
    assert sorted(line.split()[-1].split("-")[1] for line in zygotes) == ["n1", "n2"], zygotes
    assert not kernel.run(cell("slurmkill", marker + "-k")).error
    assert wait_until(lambda: "".join(logs(run_root, "slurmkill")).count("worker up") == 2, UP_TIMEOUT, interval=0.5)
    assert len(steps(slurm_cluster, job)) == 2 and zygote_steps(slurm_cluster, job) == zygotes
    assert all("--- nbworkers: forked from zygote" in text for text in logs(run_root, "slurmkill"))
    os.kill(kernel.pid, signal.SIGKILL)  # srun's stdin closes: each host stops its worker, and its step ends
    killed = time.monotonic()  # and each zygote, at the same end of file, once its worker ended
    assert wait_until(lambda: not steps(slurm_cluster, job) and not zygote_steps(slurm_cluster, job),
                      STEPS_GONE_TIMEOUT), steps(slurm_cluster, job) + zygote_steps(slurm_cluster, job)
    print(f"every step gone {time.monotonic() - killed:.1f} s after the kernel's kill -9")
    for index in range(2):
        assert os.path.exists(f"{marker}-k-finally-{index}"), index


def test_slurm_expands_node_lists_and_the_port_probe_runs_on_each_node(slurm_cluster, allocation, monkeypatch):
    from nbworkers.magics.backends.slurm.allocation import Allocation

    env = {**os.environ, **slurm_cluster.env}
    expanded = subprocess.run(["scontrol", "show", "hostnames", "n[1-3],gpu[08-10]"], capture_output=True, text=True,
                              env=env, check=True).stdout.split()
    assert expanded == ["n1", "n2", "n3", "gpu08", "gpu09", "gpu10"]
    probe = subprocess.run(commands.probe_command(allocation["SLURM_JOB_ID"], {"n1": 2, "n2": 1}, sys.executable),
                           capture_output=True, text=True, env=env, timeout=60)
    ports = commands.parse_probe(probe.stdout)
    assert sorted(ports) == ["n1", "n2"] and len(ports["n1"]) == 2 and len(ports["n2"]) == 1, probe
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    found = Allocation.current(30, allocation)
    assert found.nodes == ("n1", "n2") and dict(found.addrs) == {"n1": "127.0.0.1", "n2": "127.0.0.1"}


def test_submit_waits_in_the_queue_saying_why_then_runs_and_cancels_its_allocation(kernel, run_root, slurm_cluster):
    """Outside an allocation (no SLURM_JOB_ID): --submit asks for one in the full ``small`` partition (n3, one CPU,
    taken by another job), the cell says it is queued and why, and runs once the other job is gone."""
    blocker = slurm_cluster.client("sbatch", "--parsable", "-p", "small", "--output=/dev/null", "--wrap=sleep 300")
    assert blocker.returncode == 0, blocker
    blocker_id = blocker.stdout.strip()
    assert wait_until(lambda: slurm_cluster.client("squeue", "-h", "-j", blocker_id, "-o", "%T").stdout.strip()
                      == "RUNNING", 30)
    seen: list[str] = []

    def free_the_partition_once_ours_waits() -> None:
        def ours() -> str:
            listed = slurm_cluster.client("squeue", "-h", "-n", "nbw-queued", "-o", "%T %r").stdout.strip()
            seen.append(listed)
            return listed
        wait_until(lambda: ours() == "PENDING Resources", 60, interval=0.2)
        time.sleep(QUEUED_LOOKS)  # the cell's own looks at the queue see it too
        slurm_cluster.client("scancel", blocker_id)

    freer = threading.Thread(target=free_the_partition_once_ours_waits, daemon=True)
    freer.start()
    ran = kernel.run("%%worker -n 1 --backend slurm --submit --partition small --time 5 --block --name queued\n"
                     "import os\nprint('RAN ON', os.environ['SLURMD_NODENAME'], flush=True)\n", timeout=180)
    freer.join(5)
    assert not ran.error, ran.text
    assert "PENDING Resources" in seen, seen
    assert re.search(r"nbworkers: Slurm job \d+ queued \(Resources\)", ran.stderr), ran.text
    assert re.search(r"nbworkers: Slurm job \d+ started on n3 after", ran.stderr), ran.text
    assert "RAN ON n3" in (run_root / "queued" / "worker-0.log").read_text()
    assert wait_until(lambda: not slurm_cluster.jobs(), 20), slurm_cluster.jobs()  # the run's end cancelled it
    assert not list(run_root.glob(".slurm-*.alive"))

    refused = kernel.run("%%worker -n 1 --backend slurm --partition small\nprint(1)\n")
    assert "--partition: only with --submit" in refused.stderr, refused.text


TICKS = """\
import time
for i in range(100000):
    print("tick", i, flush=True)
    time.sleep(0.2)
"""


def _ticks(run_root, name: str) -> int:
    paths = [run_root / name / f"worker-{i}.log" for i in range(2)]
    return min(path.read_text().count("tick") if path.exists() else 0 for path in paths)


@pytest.mark.own_kernel  # it kills its kernel
def test_a_detached_slurm_run_outlives_its_kernel_and_its_steps_end_with_its_supervisor(
        allocation, kernel, run_root, slurm_cluster):
    name, job = "slurmdetach", allocation["SLURM_JOB_ID"]
    started = kernel.run(worker_cell(f"-n 2 --backend slurm --name {name} --detach", TICKS))
    assert not started.error, started.text
    assert wait_until(lambda: _ticks(run_root, name) >= 3, UP_TIMEOUT, interval=0.5), "no worker ticked"
    state = json.loads((run_root / name / "state.json").read_text())
    supervisor = psutil.Process(state["kernel_pid"])
    assert state["backend"] == "slurm" and state.get("detached") is True and supervisor.pid != kernel.pid
    assert "nbworkers.magics.run.detach.supervisor" in " ".join(supervisor.cmdline())
    try:
        os.kill(kernel.pid, signal.SIGKILL)
        before = _ticks(run_root, name)
        assert wait_until(lambda: _ticks(run_root, name) >= before + 10, 60), "the run stopped with its kernel"
        assert len(steps(slurm_cluster, job)) == 2
        supervisor.kill()  # its srun's stdin closes: each host stops its worker and the step ends
        assert wait_until(lambda: not steps(slurm_cluster, job), STEPS_GONE_TIMEOUT), steps(slurm_cluster, job)
    finally:
        if supervisor.is_running():
            supervisor.kill()  # the test saw it start (its cmdline checked above)


def test_a_session_on_two_slurm_nodes_keeps_its_state_between_cells(allocation, kernel, slurm_cluster):
    job = allocation["SLURM_JOB_ID"]
    first = kernel.run("%%worker -n 2 --backend slurm --session ss --block\nimport os\n"
                       "x = 40 + int(os.environ['NBWORKERS_WORKER'])\nprint('X', x, os.environ['SLURMD_NODENAME'])\n",
                       timeout=UP_TIMEOUT)
    assert not first.error and "X 40 n1" in first.stdout and "X 41 n2" in first.stdout, first.text
    second = kernel.run("%%worker --session ss --block\nprint('Y', x + 1)\n", timeout=60)
    assert not second.error and "Y 41" in second.stdout and "Y 42" in second.stdout, second.text
    assert len(steps(slurm_cluster, job)) == 2  # the same two steps serve both cells
    stopped = kernel.run("%workers stop ss")
    assert not stopped.error, stopped.text
    assert wait_until(lambda: not steps(slurm_cluster, job), STEPS_GONE_TIMEOUT), steps(slurm_cluster, job)


def test_an_error_in_the_cell_fails_the_run_as_on_one_machine(allocation, kernel, slurm_cluster):
    job = allocation["SLURM_JOB_ID"]
    ran = kernel.run("%%worker -n 2 --backend slurm --block --name slurmfail\nimport os\n"
                     "if os.environ['NBWORKERS_WORKER'] == '1':\n    raise ValueError('boom on ' + "
                     "os.environ['SLURMD_NODENAME'])\n", timeout=UP_TIMEOUT)
    assert ran.error, ran.text  # a failed run fails the cell
    snap = kernel.value("nbworkers.get_cluster('slurmfail').snapshot()")
    assert snap["status"] == "failed" and snap["failure_kind"] == "WorkerRaised" and snap["restarts"] == 0, snap
    assert "ValueError: boom on n2" in snap["error"], snap["error"]
    assert wait_until(lambda: not steps(slurm_cluster, job), STEPS_GONE_TIMEOUT), steps(slurm_cluster, job)


@pytest.mark.own_kernel  # it kills its kernel
def test_a_submitted_allocation_ends_by_itself_after_its_kernels_kill_9(kernel, run_root, slurm_cluster):
    """The batch job holding a --submit allocation lives while its kernel's heartbeat file is fresh: the kernel's
    kill -9 ends the workers' steps (srun's stdin) and, ``heartbeat_timeout`` later, the job itself."""
    configured = kernel.run("from nbworkers.magics.settings import settings\n"
                            "settings().config.SlurmSettings.heartbeat_timeout = 5.0\n")
    assert not configured.error, configured.text
    started = kernel.run(worker_cell("-n 2 --backend slurm --submit --spread --time 5 --name slurmbeat", TICKS),
                         timeout=120)
    assert not started.error, started.text
    assert wait_until(lambda: _ticks(run_root, "slurmbeat") >= 3, UP_TIMEOUT, interval=0.5), "no worker ticked"
    assert len(slurm_cluster.jobs()) == 1 and list(run_root.glob(".slurm-slurmbeat-*.alive")), slurm_cluster.jobs()
    os.kill(kernel.pid, signal.SIGKILL)
    killed = time.monotonic()
    assert wait_until(lambda: not slurm_cluster.jobs(), 5.0 + STEPS_GONE_TIMEOUT), slurm_cluster.jobs()
    print(f"the submitted allocation ended {time.monotonic() - killed:.1f} s after the kernel's kill -9")
    assert not list(run_root.glob(".slurm-slurmbeat-*.alive"))  # the job removed the stale heartbeat
