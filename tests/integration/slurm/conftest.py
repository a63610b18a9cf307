"""The Slurm tests' one cluster, started once for the test session and stopped after it: a real Slurm 22.05 on this
machine (tests/slurm_cluster.py: munged, slurmctld and three ``slurmd -N nX`` on 127.0.0.1, the project's own
config), partitions ``nodes`` (n1, n2; the default) and ``small`` (n3, one CPU). Every daemon is stopped by its
pid at the end; the teardown fails when one had to be killed or a step of the cluster was left.

- ``slurm_cluster``: the running cluster (``.env`` is what a client needs: ``SLURM_CONF``; ``.as_user(...)`` runs
  a command as another user; ``.jobs()`` what Slurm still has).
- ``slurm_user``: a fresh non-root Unix user (tests/hub_helpers.py ``unix_users``), removed at the end with a check
  that none of its processes was left; jobs submitted as it run as it on the nodes. Its commands:
  ``slurm_cluster.as_user(slurm_user.uid, slurm_user.gid, slurm_user.home, "srun", ...)``. (A kernel as this user
  needs an interpreter every user can run: this checkout's .venv is made from a Python under /root, which only
  root can run; test_slurm_user.py runs its notebook with .venv-installed, made from Debian's python3, as
  tests/integration/test_jupyterhub.py does.)
- every test here gets ``SLURM_CONF`` in ``kernel_env`` (the test kernel is a Slurm client), and after each test no
  job may be left (cancelled, and the test fails, when one is).

Without the packages (``make slurm-deps``) or root the tests are skipped, saying why; in CI (``CI=true``) that is a
failure instead: CI must run them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time

import pytest
from hub_helpers import UnixUser, processes_of, unix_users
from slurm_cluster import SlurmCluster, install_hint, missing_commands, running_cluster

JOBS_END_TIMEOUT = 20.0  # s for a test's finished jobs to leave squeue (completing: KillWait is 5 s)
ZYGOTES_MARK = "node_zygotes"
USER_PROCESSES_TIMEOUT = 15.0  # s for the test user's last processes to be gone (reaped) after the cluster's stop


def unavailable() -> str | None:
    """Why the test Slurm cannot run here (None: it can)."""
    missing = missing_commands()
    if missing:
        return f"Slurm is not installed here (no {', '.join(missing)}): {install_hint()}"
    if os.geteuid() != 0:
        return "the test Slurm needs root: its slurmd starts each job as the job's user, and the tests make a user"
    lacking = [name for name in ("setpriv", "useradd", "userdel") if shutil.which(name) is None]
    if lacking:
        return f"no {', '.join(lacking)} here (util-linux, passwd)"
    return None


def require_slurm() -> None:
    why = unavailable()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the Slurm tests: {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def slurm_user() -> UnixUser:
    require_slurm()
    with unix_users(f"nbwsl{secrets.token_hex(3)}", ["user"]) as users:
        yield users["user"]
        # after the cluster's stop (its jobs cancelled): the job's processes that ended under an ended parent wait
        # for pid 1 to reap them; unix_users counts a zombie as a process left
        deadline = time.monotonic() + USER_PROCESSES_TIMEOUT
        while processes_of({users["user"].uid}) and time.monotonic() < deadline:
            time.sleep(0.2)


@pytest.fixture(scope="session")
def slurm_cluster(slurm_user: UnixUser) -> SlurmCluster:
    """Started after the user and stopped before it is removed: its jobs end first."""
    problems: list[str] = []
    with running_cluster(problems=problems) as cluster:
        print(f"test Slurm up in {cluster.startup_seconds['total']:.2f} s: {cluster.startup_seconds}")
        yield cluster
    assert not problems, f"stopping the test Slurm: {problems}"


@pytest.fixture(autouse=True)
def slurm_test_environment(request: pytest.FixtureRequest, slurm_cluster: SlurmCluster, kernel_env: dict[str, str]):
    """The test kernel is a client of the test Slurm, without zygotes on the nodes but in the tests marked
    ``node_zygotes`` (the warm path: a zygote step per node imports TensorFlow, ~5-10 s of CPU each where `make test`
    is CPU-bound, which a test of plain cells would wait for and not use); no job may outlive its test."""
    kernel_env.update(slurm_cluster.env)
    if request.node.get_closest_marker(ZYGOTES_MARK) is None:
        kernel_env["NBWORKERS_ZYGOTE"] = "0"
    yield
    deadline = time.monotonic() + JOBS_END_TIMEOUT
    while (left := slurm_cluster.jobs()) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        slurm_cluster.cancel_all_jobs()
        pytest.fail(f"jobs left after the test (now cancelled): {left}")
