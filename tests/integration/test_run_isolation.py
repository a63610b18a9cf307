"""Isolation of a run on a shared machine, with real kernels and real (forked) workers:

- a run root another user owns or can write to is refused — at ``%load_ext`` and at launch — with its name and
  the fix in the error, and nothing planted in it (by ``nobody``) runs;
- a forged ``state.json`` naming a live run's hosts, its forked workers and the kernel's zygote, with their
  true create times, gets nothing killed by the leftover reaper; forked workers carry their own run's id in
  ``/proc``, the zygote a placeholder; the kernel still stops its own run, and its zygote outlives that stop.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from conftest import Kernel, ended, wait_until

from nbworkers.magics.backends.zygotes import ZYGOTE_MODULE
from nbworkers.magics.rundir import layout as rundir
from nbworkers.magics.rundir import leftovers
from nbworkers.procs.ownership import started_since_boot
from nbworkers.procs.strays import kill_strays, processes_under
from nbworkers.protocol.private.marker import RUN_ID_PLACEHOLDER

CLUSTER_UP_TIMEOUT = 180
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
as_root = pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"),
                             reason="acting as another user needs root and setpriv (CI runs as root)")


def as_nobody(code: str) -> None:
    done = subprocess.run([*NOBODY, sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def failure(ran) -> str:
    """What a failed cell showed (a UsageError goes to stderr, an exception to the error)."""
    assert ran.status == "error", ran
    return ran.error + ran.stderr


def environ(pid: int) -> dict[str, str]:
    try:
        return psutil.Process(pid).environ()
    except psutil.Error:
        return {}


@pytest.fixture
def shared_base():
    """A folder under /tmp that ``nobody`` can reach (pytest's own temp folders are private to us)."""
    base = Path(tempfile.mkdtemp(prefix="nbworkers-shared-", dir="/tmp"))
    base.chmod(0o755)
    yield base
    kill_strays(base / "runs")
    shutil.rmtree(base, ignore_errors=True)


@as_root
def test_a_run_root_others_can_write_or_own_is_refused_and_nothing_planted_in_it_runs(kernel, shared_base):
    proofs = shared_base / "proofs"
    proofs.mkdir()
    proofs.chmod(0o777)
    proof = proofs / "planted-ran"
    shared = shared_base / "runs"
    shared.mkdir()
    shared.chmod(0o1777)  # a shared folder, like /tmp
    planted_cell = f"\nopen({str(proof)!r}, 'w').close()\n"
    as_nobody(f"import os, json\nd = {str(shared / 'victim')!r}\nos.mkdir(d, 0o777)\nos.chmod(d, 0o777)\n"
              f"open(d + '/cell.py', 'w').write({planted_cell!r})\n"
              f"open(d + '/state.json', 'w').write(json.dumps({{'status': 'finished'}}))\n")
    ran = kernel.run(f"from nbworkers.magics.settings import settings\nsettings().run_root = {str(shared)!r}")
    assert not ran.error, ran.error
    for cell in ("%%worker -n 1 --name victim --block\nprint('victim ran')\n", "%workers", "%workers attach victim"):
        shown = failure(kernel.run(cell))
        assert str(shared) in shown and f"chmod 700 {shared}" in shown and "NBWORKERS_RUN_ROOT" in shown, (cell, shown)
    time.sleep(1.0)
    assert not proof.exists() and not processes_under(shared)
    assert (shared / "victim" / "cell.py").stat().st_uid != os.getuid()  # left as it was: not ours to touch

    owned = shared_base / "theirs"
    owned.mkdir(mode=0o700)
    os.chown(owned, 65534, 65534)
    ran = kernel.run(f"settings().run_root = {str(owned)!r}")
    assert not ran.error, ran.error
    shown = failure(kernel.run("%%worker -n 1 --name mine --block\nprint('ran')\n"))
    assert str(owned) in shown and "belongs to user id 65534" in shown, shown
    assert not list(owned.iterdir())


@as_root
def test_load_ext_names_an_unsafe_run_root(tmp_path, kernel_env):
    shared = tmp_path / "shared-runs"
    shared.mkdir()
    shared.chmod(0o777)
    notebook = tmp_path / "nb"
    notebook.mkdir()
    k = Kernel(notebook, {**kernel_env, "NBWORKERS_RUN_ROOT": str(shared)},
               kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    try:
        shown = failure(k.run("%load_ext nbworkers"))
        assert str(shared) in shown and f"chmod 700 {shared}" in shown, shown
    finally:
        k.shutdown()
    assert not list(shared.iterdir())


def live_run(kernel, run_root: Path) -> dict:
    ran = kernel.run("%%worker -n 2 --name live\nimport time\nprint('up', flush=True)\ntime.sleep(300)\n")
    assert not ran.error, ran.error

    def up():
        state = rundir.read_state(run_root / "live")
        if not state or [w["status"] for w in state["workers"]] != ["running", "running"]:
            return None
        return state if len(state.get("processes") or []) == 4 else None  # 2 hosts, 2 workers recorded

    state = wait_until(up, CLUSTER_UP_TIMEOUT, 0.2)
    assert state, (run_root / "live" / "worker-0.log").read_text()
    return state


def zygotes_of(run_root: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(ZYGOTE_MODULE in part for part in cmdline) and environ(proc.pid).get("NBWORKERS_SPARE") == str(run_root):
            try:
                if not any(ZYGOTE_MODULE in part for part in proc.parent().cmdline()):
                    found.append(proc)
            except psutil.Error:
                continue
    return found


def test_a_forged_state_file_kills_neither_a_live_runs_workers_nor_the_zygote(kernel, run_root):
    state = live_run(kernel, run_root)
    workers = [w["pid"] for w in state["workers"]]
    [zygote] = zygotes_of(run_root)
    assert all(psutil.Process(pid).ppid() == zygote.pid for pid in workers), "the workers were not forked"
    # forked workers carry their own run's id in /proc; the zygote only the placeholder
    assert [environ(pid).get("NBWORKERS_RUN_ID") for pid in workers] == [state["run_id"]] * 2
    assert environ(zygote.pid).get("NBWORKERS_RUN_ID") == RUN_ID_PLACEHOLDER
    hosts = state["host_pids"]
    everyone = [zygote.pid, *hosts, *workers]
    pairs = [[pid, started_since_boot(pid)] for pid in everyone]  # public: /proc/PID/stat
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for name, run_id in [("forged", "f" * 24), ("forged-old", None), ("forged-placeholder", RUN_ID_PLACEHOLDER)]:
        forged_dir = run_root / name
        forged_dir.mkdir(mode=0o700)
        forged = {**state, "name": name, "run_dir": str(forged_dir), "kernel_pid": dead.pid, "status": "running",
                  "host_pids": everyone, "worker_pgids": everyone, "processes": pairs, "started": time.time() - 600}
        if run_id is None:
            forged.pop("run_id")
        else:
            forged["run_id"] = run_id
        rundir.write_state(forged_dir, forged)
    assert sorted(leftovers.reap_leftovers(run_root, kill_grace=0.5)) == ["forged", "forged-old",
                                                                          "forged-placeholder"]
    time.sleep(1.0)
    gone = [p for p in everyone if ended(p)]
    assert not gone, (gone, everyone)
    assert rundir.read_state(run_root / "live")["status"] == "running"
    assert json.loads((run_root / "forged" / "state.json").read_text())["status"] == "stopped"  # kernel gone: end_of

    stopped = kernel.run("%workers stop live")  # its own kernel still stops it
    assert not stopped.error, stopped.error
    assert wait_until(lambda: all(ended(p) for p in workers + hosts), 60)
    assert zygote.is_running()  # the zygote is the kernel's: it goes with the kernel (the fixture checks)
