"""``%%worker --detach`` from a notebook folder other users can write to (magics/run/detach/start.py, start_log.py):
modules another user (``nobody``, ``setpriv``) planted there under the names of the standard library's run nowhere
(the supervisor starts with ``-P`` in a private folder of its own, for a plain run and for a session), while the
workers still run in that folder and import the user's own module from it; the supervisor's stderr ends in the run
directory's ``supervisor.log`` (0600) and its start folder is gone. A supervisor that cannot start leaves its
stderr in a 0600 file, and the error names it and quotes its end. How detached runs are tested otherwise:
test_detach.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import processes_of_run_root, wait_until

from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.run.detach import start as detach_start
from nbworkers.magics.run.detach import start_log
from nbworkers.magics.settings import WorkerSettings
from nbworkers.protocol.private.dirs import runtime_dir

pytestmark = pytest.mark.timeout(300)
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
as_nobody_available = os.getuid() == 0 and shutil.which("setpriv") is not None
PLANTED = ("pickle", "json", "runpy", "traceback", "signal", "threading", "subprocess", "zmq", "psutil", "traitlets")
PLANT = """\
import os, sys
folder, proofs = sys.argv[1], sys.argv[2]
for name in sys.argv[3:]:
    with open(os.path.join(folder, name + ".py"), "w") as module:
        module.write("import os\\nopen(os.path.join(%r, %r + '-' + str(os.getpid())), 'w').close()\\n" % (proofs, name))
"""
RUN_CELL = """%%worker -n 2 --detach --name planted
import helper
print("HELPER", helper.VALUE, flush=True)
"""
SESSION_CELL = """%%worker -n 1 --detach --session plantedsession --block
import helper
print("SESSION HELPER", helper.VALUE, flush=True)
"""


@pytest.fixture
def shared_notebook():
    """A notebook folder anyone may write to (0777, no sticky bit) under /tmp, the user's own module in it, and a
    folder (0777) where a planted module leaves its proof when it runs."""
    base = Path(tempfile.mkdtemp(prefix="nbworkers-planted-", dir="/tmp"))
    base.chmod(0o755)
    notebook, proofs = base / "notebook", base / "proofs"
    for folder in (notebook, proofs):
        folder.mkdir()
        folder.chmod(0o777)
    (notebook / "helper.py").write_text("VALUE = 'from the notebook folder'\n")
    yield notebook, proofs
    shutil.rmtree(base, ignore_errors=True)


def _state(run_root: Path, name: str) -> dict:
    try:
        return json.loads((run_root / name / "state.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.skipif(not as_nobody_available, reason="acting as another user needs root and setpriv")
def test_modules_another_user_planted_in_the_notebook_folder_never_run(kernel, run_root, shared_notebook):
    notebook, proofs = shared_notebook
    assert not kernel.run(f"%cd {notebook}").error
    planted = subprocess.run([*NOBODY, sys.executable, "-I", "-c", PLANT, str(notebook), str(proofs), *PLANTED],
                             capture_output=True, text=True, timeout=60)
    assert planted.returncode == 0, planted.stderr
    assert (notebook / "pickle.py").stat().st_uid != os.getuid()

    started = kernel.run(RUN_CELL)
    assert not started.error, started.text
    assert wait_until(lambda: _state(run_root, "planted").get("status") in ("finished", "failed", "stopped"), 120)
    logs = [(run_root / "planted" / f"worker-{i}.log").read_text() for i in (0, 1)]
    assert _state(run_root, "planted")["status"] == "finished", logs
    assert all("HELPER from the notebook folder" in log for log in logs), logs  # the cell's folder: the workers'

    ran = kernel.run(SESSION_CELL, timeout=180)
    assert not ran.error and "SESSION HELPER from the notebook folder" in ran.stdout, ran.text
    assert not kernel.run("%workers stop plantedsession").error

    assert sorted(os.listdir(proofs)) == []  # no planted module ran: not in the supervisors, not in the workers
    for name in ("planted", "plantedsession"):
        log = run_root / name / "supervisor.log"  # the supervisor's stderr, in its run directory
        assert oct(os.lstat(log).st_mode & 0o777) == "0o600"
    assert wait_until(lambda: not processes_of_run_root(run_root), 30)
    starts = runtime_dir(start_log.START_DIR_NAME)  # the kernel's too: it has this process's environment
    assert [f for f in os.listdir(starts) if f.startswith("planted")] == []  # each supervisor removed its own


def test_a_supervisor_that_cannot_start_leaves_its_stderr_and_the_error_names_it(tmp_path, monkeypatch):
    """A real supervisor process whose module is missing (as in a broken install): it dies before answering; the
    error quotes Python's own words and names the 0600 file that holds them."""
    monkeypatch.setenv("NBWORKERS_RUNTIME_DIR", str(tmp_path / "runtime"))
    spec = LaunchSpec(code="print(1)\n", workers=1, name="broken", cwd=str(tmp_path))
    with pytest.raises(detach_start.DetachFailed) as failed:
        detach_start.start_detached(spec, WorkerSettings(run_root=str(tmp_path / "runs")),
                                    module="nbworkers.magics.run.detach.no_such_supervisor")
    message = str(failed.value)
    assert "ended without starting the run (exit code 1)" in message
    assert "No module named nbworkers.magics.run.detach.no_such_supervisor" in message, message
    log = Path(message.split("stderr (", 1)[1].split("):", 1)[0])
    assert log.name == "supervisor.log" and oct(os.lstat(log).st_mode & 0o777) == "0o600"
    assert "No module named" in log.read_text() and oct(log.parent.stat().st_mode & 0o777) == "0o700"
