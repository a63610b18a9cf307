"""A user who is not root runs a notebook inside an allocation of their own, as on a cluster's login node:
``salloc -N2 jupyter nbconvert --execute`` as the test user (this folder's conftest.py ``slurm_user``), with the
installed package (.venv-installed, the wheel users get: this checkout's .venv is made from a Python under /root,
which the user cannot run). Its ``%%worker -n 2 --backend slurm`` cell trains on both nodes as that user, the run's
folder is the user's own and private, and nothing of it is left: no step, no job, no process of the user
(the fixtures check the last two).

`make test` runs this in its slurm run after .venv-installed is made (tools/test_suite.sh waits for it).
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import nbformat
import pytest
from cells import CHECKSUM, FIT, IMPORTS, KERAS_MODEL
from conftest import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[3]
INSTALLED_JUPYTER = REPO / ".venv-installed" / "bin" / "jupyter"
NOTEBOOK_TIMEOUT = 480  # s for salloc and the whole notebook: a kernel, TensorFlow's imports, two steps, the training
RUN = "usertrain"
JOB_END_TIMEOUT = 20  # s for the allocation to leave squeue after salloc ended (completing: KillWait is 5 s)

CELLS = [
    "%load_ext nbworkers",
    f"%%worker -n 2 --backend slurm --name {RUN} --env TF_USE_LEGACY_KERAS=1\n" + IMPORTS
    + 'print("ON NODE", os.environ["SLURMD_NODENAME"], "UID", os.getuid(), flush=True)\n'
    + KERAS_MODEL + FIT + CHECKSUM,
    f"%workers wait {RUN} --timeout 300",
    "import json, os, nbworkers\n"
    f"snap = nbworkers.get_cluster({RUN!r}).snapshot()\n"
    'print("SNAPSHOT", json.dumps({"status": snap["status"], "backend": snap["backend"], "run_dir": snap["run_dir"],\n'
    '                              "hosts": [w["host"] for w in snap["workers"]],\n'
    '                              "job": os.environ["SLURM_JOB_ID"]}))',
]


def test_a_user_trains_on_both_nodes_of_their_own_allocation_from_a_notebook(slurm_cluster, slurm_user):
    if not INSTALLED_JUPYTER.exists():
        why = f"no {INSTALLED_JUPYTER}: `make installed-env` makes it (the wheel, installed for every user)"
        if os.environ.get("CI") == "true":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    home = slurm_user.home
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    path = home / "train.ipynb"
    nbformat.write(notebook, path)
    os.chown(path, slurm_user.uid, slurm_user.gid)

    done = slurm_cluster.as_user(
        # no local zygote prewarmed at %load_ext: its TensorFlow import would serve no worker of a Slurm run
        slurm_user.uid, slurm_user.gid, home, "env", "NBWORKERS_ZYGOTE_PREWARM=0",
        "salloc", "-N2", "-J", "nbw-user-notebook", "--time=15",
        str(INSTALLED_JUPYTER), "nbconvert", "--to", "notebook", "--execute", "--output", "ran.ipynb",
        f"--ExecutePreprocessor.timeout={NOTEBOOK_TIMEOUT}", "train.ipynb", timeout=NOTEBOOK_TIMEOUT + 60)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    ran = nbformat.read(home / "ran.ipynb", as_version=4)
    text = "\n".join(output.get("text", "") for cell in ran.cells for output in cell.get("outputs", []))
    found = re.search(r"^SNAPSHOT (.*)$", text, re.MULTILINE)
    assert found, text
    snap = json.loads(found.group(1))
    assert snap["status"] == "finished" and snap["backend"] == "slurm", snap
    assert snap["hosts"] == ["n1", "n2"], snap  # one worker on each node of the user's allocation

    run_dir = Path(snap["run_dir"])
    assert run_dir.is_relative_to(home), run_dir  # the user's own run root, not a shared one
    info = run_dir.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (slurm_user.uid, 0o700), (info.st_uid, oct(info.st_mode))
    logs = [(run_dir / f"worker-{index}.log").read_text() for index in range(2)]
    assert f"ON NODE n1 UID {slurm_user.uid}" in logs[0] and f"ON NODE n2 UID {slurm_user.uid}" in logs[1], logs
    sums = [re.findall(r"CHECKSUM (\S+)", log) for log in logs]
    assert all(len(found) == 1 for found in sums) and sums[0] == sums[1], f"different weights or none: {sums}"
    # salloc ended with the notebook: its allocation ends (completing, then gone), with no step of it left
    def gone() -> bool:
        return not [job for job in slurm_cluster.jobs() if job.split()[0] == snap["job"]]

    assert wait_until(gone, JOB_END_TIMEOUT), slurm_cluster.jobs()
