"""The test Slurm itself (tests/slurm_cluster.py), as the Slurm backend's tests rely on it: a step inside an
allocation spans both nodes and runs as the user who asked; the ``small`` partition fills, and the next job waits
with Slurm's reason; stopping a cluster ends every daemon by its pid and leaves no step and no process of the job.
No Python in the jobs: each test takes a few seconds."""

from __future__ import annotations

import contextlib
import time

import psutil
import pytest
from hub_helpers import UnixUser, processes_of
from slurm_cluster import PARTITION, SMALL_PARTITION, SlurmCluster, running_cluster

pytestmark = pytest.mark.slurm

STATE_TIMEOUT = 30.0  # s for a job to reach a state (Slurm schedules within a second or two here)


def submit(cluster: SlurmCluster, user: UnixUser, *args: str) -> str:
    """sbatch as ``user``; the job's id."""
    done = cluster.as_user(user.uid, user.gid, user.home, "sbatch", "--parsable", "-o", "/dev/null", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def job_field(cluster: SlurmCluster, job: str, field: str) -> str:
    """One squeue field of a job (%T its state, %r its reason, %N its nodes); empty once it left the queue."""
    return cluster.client("squeue", "-h", "-j", job, "-o", field).stdout.strip()


def live_processes_of(user: UnixUser) -> list[psutil.Process]:
    """The user's processes that still run (a zombie whose parent ended waits for pid 1 to reap it: it is gone)."""
    found = []
    for proc in processes_of({user.uid}):
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def wait_for(what: str, condition, timeout: float = STATE_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not after {timeout:.0f} s: {what}"
        time.sleep(0.1)


def test_a_step_inside_an_allocation_spans_both_nodes_as_the_user(slurm_cluster: SlurmCluster, slurm_user: UnixUser):
    done = slurm_cluster.as_user(
        slurm_user.uid, slurm_user.gid, slurm_user.home, "salloc", "-N2", f"--partition={PARTITION}",
        "srun", "-N2", "-n2", "--label", "sh", "-c",
        'echo "$SLURMD_NODENAME $SLURM_NODEID $(id -un) $SLURM_JOB_NUM_NODES"',
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Granted job allocation" in done.stderr
    lines = sorted(line for line in done.stdout.splitlines() if line.strip())
    assert lines == [f"0: n1 0 {slurm_user.name} 2", f"1: n2 1 {slurm_user.name} 2"], done.stdout


def test_the_small_partition_fills_and_the_next_job_waits_with_the_reason(slurm_cluster: SlurmCluster,
                                                                           slurm_user: UnixUser):
    holder = submit(slurm_cluster, slurm_user, f"--partition={SMALL_PARTITION}", "-n1", "--wrap", "sleep 300")
    wait_for("the first job runs on n3", lambda: job_field(slurm_cluster, holder, "%T %N") == "RUNNING n3")
    waiting = submit(slurm_cluster, slurm_user, f"--partition={SMALL_PARTITION}", "-n1", "--wrap", "true")
    wait_for("the second job waits for resources",
             lambda: job_field(slurm_cluster, waiting, "%T %r") == "PENDING Resources")  # fmt: skip
    assert slurm_cluster.client("scancel", holder, waiting).returncode == 0
    wait_for("both jobs end", lambda: not job_field(slurm_cluster, holder, "%T")
             and not job_field(slurm_cluster, waiting, "%T"))  # fmt: skip
    wait_for("the job's sleep ends", lambda: not live_processes_of(slurm_user))


def test_stopping_a_cluster_ends_its_daemons_its_steps_and_their_processes(slurm_user: UnixUser):
    problems: list[str] = []
    with running_cluster(problems=problems) as cluster:
        job = submit(cluster, slurm_user, "-N2", "--wrap", "srun sleep 300")
        def sleeping() -> list[psutil.Process]:
            return [proc for proc in live_processes_of(slurm_user) if proc.name() == "sleep"]

        wait_for("the step's sleep runs on both nodes",  # the batch step's slurmstepd and one on each node for srun's
                 lambda: len(cluster.stepds()) == 3 and len(sleeping()) == 2)  # fmt: skip
        daemons = [daemon.process() for daemon in cluster.daemons]
        stepds = cluster.stepds()
        sleeps = sleeping()
        assert len(sleeps) == 2 and all(daemons), (sleeps, daemons)
        root = cluster.root
    assert not problems, problems
    gone = [*daemons, *stepds, *sleeps]
    assert not [proc for proc in gone if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE]
    assert not root.exists()
    assert not cluster.stepds() and not live_processes_of(slurm_user), job


def test_every_daemon_listens_on_127_0_0_1_alone(slurm_cluster: SlurmCluster):
    """CommunicationParameters=NoCtldInAddrAny,NoInAddrAny: not on every interface, Slurm's default."""
    listening = {}
    for daemon in slurm_cluster.daemons:
        proc = daemon.process()
        assert proc is not None, f"{daemon.name} is not running"
        listening[daemon.name] = {f"{c.laddr.ip}:{c.laddr.port}" for c in proc.net_connections("tcp")
                                  if c.status == psutil.CONN_LISTEN}  # fmt: skip
    ports = slurm_cluster.ports
    assert listening == {"munged": set(), "slurmctld": {f"127.0.0.1:{ports['ctld']}"},
                         **{f"slurmd-{node}": {f"127.0.0.1:{ports[node]}"} for node in ("n1", "n2", "n3")}}, listening
