"""The nbworkers kernelspec: install/uninstall into a temporary prefix, `jupyter kernelspec list` finds it, and a
kernel started from it runs a %%worker cell with no %load_ext while the kernel itself sees no GPU."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from nbworkers.kernel_driver import KernelDriver
from nbworkers.kernelspec.launch import ALL_GPUS, MACHINE_GPUS_ENV, worker_gpu_pool

PY = sys.executable
JUPYTER = str(Path(sys.executable).with_name("jupyter"))
KERNEL_READY_TIMEOUT = 90
CELL_TIMEOUT = 180
STOP_TIMEOUT = 15


def kernelspec_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "nbworkers.kernelspec", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def isolated_jupyter_env(tmp_path: Path) -> dict[str, str]:
    """Jupyter's user dirs inside tmp_path, so nothing the tests do touches ~/.jupyter or ~/.local."""
    env = dict(os.environ)
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime")):
        env[var] = str(tmp_path / "jupyter" / sub)
    env.pop("JUPYTER_PATH", None)
    env.pop("TF_CONFIG", None)
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    return env


@pytest.fixture
def prefix(tmp_path: Path) -> Path:
    return tmp_path / "prefix"


def test_help_lists_commands_and_flags():
    result = kernelspec_cli("--help")
    assert result.returncode == 0
    assert "install" in result.stdout and "uninstall" in result.stdout
    result = kernelspec_cli("install", "--help")
    assert result.returncode == 0
    for flag in ("--user", "--sys-prefix", "--prefix", "--name", "--display-name"):
        assert flag in result.stdout


def test_install_list_uninstall(tmp_path: Path, prefix: Path):
    env = isolated_jupyter_env(tmp_path)
    result = kernelspec_cli("install", "--prefix", str(prefix), env=env)
    assert result.returncode == 0, result.stderr
    spec_dir = prefix / "share" / "jupyter" / "kernels" / "nbworkers"
    spec = json.loads((spec_dir / "kernel.json").read_text())
    assert spec["display_name"] == "Python 3 (nbworkers)"
    assert spec["language"] == "python"
    assert spec["argv"][0] == PY
    assert "nbworkers.kernelspec.launch" in spec["argv"] and "{connection_file}" in spec["argv"]
    assert "--IPKernelApp.extra_extensions=nbworkers" in spec["argv"]

    listed = subprocess.run([JUPYTER, "kernelspec", "list", "--json"], capture_output=True, text=True,
                            env={**env, "JUPYTER_PATH": str(prefix / "share" / "jupyter")}, timeout=60)
    assert listed.returncode == 0, listed.stderr
    kernels = json.loads(listed.stdout)["kernelspecs"]
    assert kernels["nbworkers"]["spec"]["display_name"] == "Python 3 (nbworkers)"
    assert Path(kernels["nbworkers"]["resource_dir"]) == spec_dir

    # another name and display name, side by side
    result = kernelspec_cli("install", "--prefix", str(prefix), "--name", "nbw-test", "--display-name", "NBW test",
                            env=env)
    assert result.returncode == 0, result.stderr
    other = json.loads((prefix / "share/jupyter/kernels/nbw-test/kernel.json").read_text())
    assert other["display_name"] == "NBW test"

    assert kernelspec_cli("uninstall", "--prefix", str(prefix), env=env).returncode == 0
    assert not spec_dir.exists()
    assert (prefix / "share/jupyter/kernels/nbw-test").exists()
    again = kernelspec_cli("uninstall", "--prefix", str(prefix), env=env)
    assert again.returncode == 1 and "no kernelspec named 'nbworkers'" in again.stderr


def test_install_user_goes_to_the_jupyter_data_dir(tmp_path: Path):
    env = isolated_jupyter_env(tmp_path)
    result = kernelspec_cli("install", "--user", env=env)
    assert result.returncode == 0, result.stderr
    assert (Path(env["JUPYTER_DATA_DIR"]) / "kernels" / "nbworkers" / "kernel.json").is_file()
    assert kernelspec_cli("uninstall", "--user", env=env).returncode == 0
    assert not (Path(env["JUPYTER_DATA_DIR"]) / "kernels" / "nbworkers").exists()


def test_unwritable_data_dir_gives_a_clear_error(tmp_path: Path):
    env = isolated_jupyter_env(tmp_path)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the prefix should be")
    result = kernelspec_cli("install", "--prefix", str(blocker), env=env)
    assert result.returncode == 1
    assert "not writable" in result.stderr and "--user" in result.stderr
    assert "Traceback" not in result.stderr

    if os.geteuid() != 0:  # root writes anywhere: the read-only case only means something for other users
        readonly = tmp_path / "readonly"
        readonly.mkdir()
        readonly.chmod(stat.S_IRUSR | stat.S_IXUSR)
        try:
            result = kernelspec_cli("install", "--prefix", str(readonly), env=env)
        finally:
            readonly.chmod(stat.S_IRWXU)
        assert result.returncode == 1 and "not writable" in result.stderr


def test_bad_flags_and_names_are_refused(tmp_path: Path, prefix: Path):
    env = isolated_jupyter_env(tmp_path)
    both = kernelspec_cli("install", "--user", "--prefix", str(prefix), env=env)
    assert both.returncode == 2 and "not allowed with" in both.stderr
    bad = kernelspec_cli("install", "--prefix", str(prefix), "--name", "no/slashes", env=env)
    assert bad.returncode == 1 and "--name" in bad.stderr and "Traceback" not in bad.stderr


def test_uninstall_refuses_a_kernel_that_is_not_ours(tmp_path: Path, prefix: Path):
    env = isolated_jupyter_env(tmp_path)
    foreign = prefix / "share/jupyter/kernels/nbworkers"
    foreign.mkdir(parents=True)
    (foreign / "kernel.json").write_text(json.dumps({"argv": ["python", "-m", "ipykernel_launcher"],
                                                     "display_name": "x", "language": "python"}))
    result = kernelspec_cli("uninstall", "--prefix", str(prefix), env=env)
    assert result.returncode == 1 and "not an nbworkers kernel" in result.stderr
    assert foreign.exists()


def test_all_gpus_means_what_nvidia_smi_lists(tmp_path: Path):
    """A GPU cannot run here: a stand-in nvidia-smi on PATH lists two."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Fake (UUID: GPU-a)'\necho 'GPU 1: Fake (UUID: GPU-b)'\n")
    smi.chmod(0o755)
    env = {"PATH": str(bin_dir), MACHINE_GPUS_ENV: ALL_GPUS, "CUDA_VISIBLE_DEVICES": "-1"}
    assert worker_gpu_pool(env) == ["0", "1"]


# ----------------------------------------------------------------------------------------------- a real kernel
def _kill_run_processes(run_root: Path) -> None:
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid != os.getpid() and proc.environ().get("NBWORKERS_RUN_DIR", "").startswith(str(run_root)):
                os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        except (psutil.Error, OSError):
            continue


def test_kernel_from_the_spec_runs_a_worker_cell_without_load_ext(tmp_path: Path, prefix: Path):
    env = isolated_jupyter_env(tmp_path)
    result = kernelspec_cli("install", "--prefix", str(prefix), env=env)
    assert result.returncode == 0, result.stderr
    run_root = tmp_path / "runs"
    notebook_dir = tmp_path / "notebook"
    notebook_dir.mkdir()
    env["NBWORKERS_RUN_ROOT"] = str(run_root)
    env["CUDA_VISIBLE_DEVICES"] = ""  # what the server was started with: no GPU (kept for the workers)
    kernel = KernelDriver(notebook_dir, env, kernel_name="nbworkers", kernel_dirs=[str(prefix / "share/jupyter/kernels")],
                          ready_timeout=KERNEL_READY_TIMEOUT)
    kernel_pid = kernel.pid
    try:
        ran = kernel.run("import os, sys\n"
                         "print(os.environ['CUDA_VISIBLE_DEVICES'], repr(os.environ['NBWORKERS_VISIBLE_GPUS']))\n"
                         "print('nbworkers' in get_ipython().extension_manager.loaded)\n"
                         "print('tensorflow' in sys.modules)", CELL_TIMEOUT)
        assert not ran.error, ran.error
        assert (ran.stdout + ran.stderr).split() == ["-1", "''", "True", "False"]

        ran = kernel.run("%%worker -n 2 --block --name hello\nimport os\nprint('hello from worker', os.environ['TF_CONFIG'])",
                         CELL_TIMEOUT)
        assert not ran.error, ran.error
        shown = ran.shown
        assert "finished" in shown, shown
        for index in (0, 1):
            log = (run_root / "hello" / f"worker-{index}.log").read_text()
            assert "hello from worker" in log and f'"index": {index}' in log
        state = json.loads((run_root / "hello" / "state.json").read_text())
        assert state["status"] == "finished" and state["kernel_pid"] == kernel_pid
    finally:
        try:
            kernel.shutdown()
        finally:
            try:
                os.killpg(kernel_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            _kill_run_processes(run_root)
