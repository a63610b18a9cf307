"""Run directories next to real processes: a run that is over is replaced while a live one of another kernel is
not, and importing the layout module in a fresh interpreter loads no process or TensorFlow library."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from nbworkers.magics.errors import ClusterNameError
from nbworkers.magics.rundir import layout as rundir
from nbworkers.magics.rundir.prepare import prepare_run_dir, run_in_use


def test_a_dir_that_is_over_is_replaced_and_a_live_one_of_another_kernel_is_not(tmp_path):
    run_dir = tmp_path / "runs" / "again"
    prepare_run_dir(run_dir, "first", None, [])
    rundir.write_state(run_dir, {"status": "finished", "kernel_pid": 1})
    assert run_in_use(run_dir) == ""
    prepare_run_dir(run_dir, "second", None, [])
    assert rundir.cell_path(run_dir).read_text() == "second" and not rundir.push_path(run_dir).exists()

    other_kernel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        rundir.write_state(run_dir, {"status": "running", "kernel_pid": other_kernel.pid, "started": time.time() + 1})
        assert "running in another kernel" in run_in_use(run_dir)
        with pytest.raises(ClusterNameError, match="running in another kernel"):
            prepare_run_dir(run_dir, "third", None, [])
        assert rundir.cell_path(run_dir).read_text() == "second"
    finally:
        other_kernel.kill()
        other_kernel.wait()
    assert run_in_use(run_dir) == ""  # its kernel is gone and nothing of it runs
    (tmp_path / "runs" / "a-file").write_text("")
    with pytest.raises(ClusterNameError, match="symlink or a file"):
        prepare_run_dir(tmp_path / "runs" / "a-file", "x", None, [])


def test_the_layout_module_imports_no_process_or_tensorflow_library():
    code = ("import sys; import nbworkers.magics.rundir.layout; "
            "print(sorted(m for m in ('psutil', 'tensorflow', 'IPython') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().replace("'", '"')) == []
