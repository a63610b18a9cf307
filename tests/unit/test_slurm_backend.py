"""The Slurm backend's pure parts (magics/backends/slurm/commands.py) and its registration's checks. Slurm's own
node list expansion, the port probe's code and the real steps: tests/integration/slurm/."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from nbworkers.magics.backends import registry
from nbworkers.magics.backends.slurm import commands
from nbworkers.magics.backends.slurm.allocation import Allocation
from nbworkers.magics.backends.slurm.backend import SlurmBackend
from nbworkers.magics.backends.slurm.kind import SLURM, check
from nbworkers.magics.backends.slurm.options import SlurmOptions
from nbworkers.magics.backends.slurm.settings import SlurmSettings
from nbworkers.magics.errors import LaunchError


def test_workers_go_to_the_nodes_in_turn_one_per_node_or_filling_each_node():
    assert commands.place(["n1", "n2"], 2) == ["n1", "n2"]  # the tutorial: one worker on each node
    assert commands.place(["n1", "n2"], 5) == ["n1", "n2", "n1", "n2", "n1"]
    assert commands.place(["n1", "n2", "n3"], 2, spread=True) == ["n1", "n2"]
    assert commands.place(["n1", "n2"], 3, tasks_per_node=2) == ["n1", "n1", "n2"]
    assert commands.counts_of(["n2", "n1", "n2"]) == {"n2": 2, "n1": 1}
    with pytest.raises(ValueError, match=r"--spread: 3 workers need 3 nodes, and the allocation has 2 nodes \(n1,"):
        commands.place(["n1", "n2"], 3, spread=True)
    with pytest.raises(ValueError, match="--tasks-per-node 1: 3 workers need 3 nodes"):
        commands.place(["n1", "n2"], 3, tasks_per_node=1)
    with pytest.raises(ValueError, match="no nodes"):
        commands.place([], 1)


def test_a_worker_is_one_step_of_one_task_on_its_node_sharing_cpus_but_not_gpus():
    command = commands.srun_command("12", "n2", "nbw-abc-g0-w1", ["python", "-m", "host"])
    assert command[:7] == ["srun", "--jobid=12", "--nodes=1", "--ntasks=1", "--nodelist=n2", "--job-name=nbw-abc-g0-w1",
                           "--overlap"]
    assert command[-3:] == ["python", "-m", "host"]
    gpus = commands.srun_command("12", "n2", "x", ["python"], gpus_per_task=2)
    assert "--gpus-per-task=2" in gpus and "--overlap" not in gpus
    assert commands.step_name("0123456789abcdef", 3, 1) == "nbw-0123456789ab-g3-w1"
    zygote = commands.zygote_step_name("n2", "0123456789abcdef")  # apart from the workers' steps (nbw-)
    assert zygote == "nbwz-n2-01234567" and not zygote.startswith(commands.STEP_NAME_PREFIX)


def test_the_kernels_allocation_variables_do_not_reach_the_steps_options():
    env = {"SLURM_NTASKS": "2", "SLURM_CPUS_PER_TASK": "4", "SRUN_CPUS_PER_TASK": "4", "SLURM_CONF": "/c",
           "SLURM_JOB_ID": "7", "TF_CONFIG": "{}", "PATH": "/bin"}
    assert commands.step_env(env) == {"SLURM_CONF": "/c", "TF_CONFIG": "{}", "PATH": "/bin"}


def test_the_port_probe_step_is_one_task_per_node_and_its_answer_is_read():
    command = commands.probe_command("12", {"n1": 2, "n2": 1}, sys.executable)
    assert command[:6] == ["srun", "--jobid=12", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=n1,n2"]
    assert command[-5:-2] == [sys.executable, "-I", "-c"] and command[-1] == "n1=2,n2=1"
    assert commands.parse_probe("srun: noise\nnbworkers-ports n2 101\nnbworkers-ports n1 x\n") == {"n2": [101]}


def test_slurms_answers_are_read():
    shown = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 NodeAddr=127.0.0.1 NodeHostName=box Version=22.05\n"
             "NodeName=gpu07 NodeAddr=gpu07.cluster NodeHostName=gpu07\n")
    assert commands.parse_node_addrs(shown) == {"n1": "127.0.0.1", "gpu07": "gpu07.cluster"}
    assert commands.parse_step_id("12.0 nbw-a-g0-w0\n12.1 nbw-a-g0-w1\n", "nbw-a-g0-w1") == "12.1"
    assert commands.parse_step_id("12.0 nbw-a-g0-w0\n", "nbw-a-g0-w1") == ""
    assert commands.step_cancelled("srun: Job step aborted\nslurmstepd-n2: error: *** STEP 1.3 ON n2 CANCELLED AT "
                                   "2026-11-29T00:29:12 ***\nsrun: error: n2: task 0: Killed\n")
    assert not commands.step_cancelled("print('CANCELLED')\n")
    assert commands.all_loopback(["127.0.0.1", "127.0.0.1"]) and not commands.all_loopback(["127.0.0.1", "10.0.0.2"])


def test_the_registrations_checks_say_what_to_do(monkeypatch):
    assert registry.get("Slurm") is SLURM and SLURM.options is SlurmOptions
    with pytest.raises(LaunchError, match="give one of them"):
        check(SlurmOptions(spread=True, tasks_per_node=2))
    with pytest.raises(LaunchError, match="--tasks-per-node 0: give 1 or more"):
        check(SlurmOptions(tasks_per_node=0))
    with pytest.raises(LaunchError, match="--partition, --time: only with --submit"):
        check(SlurmOptions(partition="gpu", time="10"))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(shutil.which("srun") or "/usr/bin/srun"),
                                                os.environ.get("PATH", "")]))
    if shutil.which("srun"):
        with pytest.raises(LaunchError, match="not inside a Slurm allocation .* or add --submit"):
            check(SlurmOptions())
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(LaunchError, match="srun is not on the kernel's PATH"):
        check(SlurmOptions())


def test_submit_asks_for_the_nodes_the_workers_need_with_the_users_options():
    assert commands.nodes_to_ask(3, False, None) == 3 and commands.nodes_to_ask(3, True, 2) == 3
    assert commands.nodes_to_ask(5, False, 2) == 3
    command = commands.sbatch_command("train", 2, "/runs/.slurm-train.alive", 120, partition="gpu", time="1:00:00",
                                      account="lab", extra=["--qos=debug"], gpus_per_node=2)
    assert command[:6] == ["sbatch", "--parsable", "--job-name=nbw-train", "--nodes=2", "--ntasks-per-node=1",
                           "--output=/dev/null"]
    assert command[6:11] == ["--partition=gpu", "--time=1:00:00", "--account=lab", "--gpus-per-node=2", "--qos=debug"]
    holder = command[-1]
    assert holder.startswith("--wrap=hb=/runs/.slurm-train.alive;") and "-lt 120 ]" in holder and "sleep 12" in holder
    bare = commands.sbatch_command("x", 1, "/r/a b", 30)
    assert not [a for a in bare if a.startswith(("--partition", "--time", "--account", "--gpus"))]
    assert "hb='/r/a b';" in bare[-1]  # quoted for the shell
    assert commands.parse_job_state("PENDING|Resources|\n") == ("PENDING", "Resources", "")
    assert commands.parse_job_state("RUNNING|None|n[1-2]\n") == ("RUNNING", "None", "n[1-2]")
    assert commands.parse_job_state("") == ("", "", "")


class _Task:
    def __init__(self, index: int) -> None:
        self.role, self.index = "worker", index


class _Allocation(Allocation):
    """The kernel's allocation without Slurm: each node's ports as the probe step would give them."""

    def free_ports(self, counts, timeout):
        return {node: [7000 + 10 * i + k for k in range(n)] for i, (node, n) in enumerate(sorted(counts.items()))}


def test_the_plan_gives_each_worker_its_nodes_address_a_port_picked_there_and_its_gpus(monkeypatch):
    allocation = _Allocation("12", ("n1", "n2"), {"n1": "10.0.0.1", "n2": "10.0.0.2"})
    backend = SlurmBackend(SlurmOptions(), gpus_per_worker=2, settings=SlurmSettings(), allocation=allocation)
    placed = backend.plan([_Task(i) for i in range(3)], None)
    assert [(p.host, p.port) for p in placed] == [("10.0.0.1", 7000), ("10.0.0.2", 7010), ("10.0.0.1", 7001)]
    assert {p.gpus for p in placed} == {"0,1"}  # two of its own each: srun --gpus-per-task=2 (Slurm sets the real ones)
    assert backend.plan([_Task(0)], 0)[0].gpus == "-1"  # --gpus-per-worker 0: none
    assert backend.capacity() > 1000
    spread = SlurmBackend(SlurmOptions(spread=True), settings=SlurmSettings(), allocation=allocation)
    assert spread.capacity() == 2
    with pytest.raises(LaunchError, match="--spread: 3 workers need 3 nodes"):
        spread.plan([_Task(i) for i in range(3)], None)
    local = SlurmBackend(SlurmOptions(), settings=SlurmSettings(),
                         allocation=_Allocation("12", ("n1",), {"n1": "127.0.0.1"}))
    assert local.relay_hosts() == ("127.0.0.1", "127.0.0.1")  # the tests' cluster: loopback only
