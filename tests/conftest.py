"""Shared fixtures: a real IPython kernel driven through jupyter_client, run directories, leftover checks."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from jupyter_client import KernelManager

from nbworkers.magics.leftovers import kill_process_groups
from nbworkers.magics.leftovers import processes_under as processes_of_run_root  # noqa: F401 (tests import it from here)

KERNEL_READY_TIMEOUT = 90  # seconds for a fresh kernel to answer
CELL_TIMEOUT = 300  # seconds for one cell (a real 2-worker TensorFlow run on 2 cores)


@dataclass
class CellResult:
    stdout: str = ""
    stderr: str = ""
    error: str = ""  # ename: evalue plus the traceback text, when the cell raised
    displays: list[dict] = field(default_factory=list)  # display_data/update_display_data/execute_result data
    msg_types: list[str] = field(default_factory=list)
    status: str = ""  # the execute_reply's status: ok, error or aborted

    @property
    def failure(self) -> str:
        """What the user saw of a failed cell: a traceback, or a UsageError's message (shown on stderr)."""
        return self.error or (self.stderr if self.status == "error" else "")

    @property
    def text(self) -> str:
        """Everything shown, as plain text: streams, errors and the last of every display."""
        shown = [d.get("text/plain", "") for d in self.displays]
        return "\n".join([self.stdout, self.stderr, self.error, *shown])


class Kernel:
    """A real ipykernel subprocess with helpers to run cells and read what they output."""

    def __init__(self, cwd: Path, env: dict[str, str], kernel_cmd: list[str] | None = None):
        self.manager = KernelManager(kernel_name="python3")
        if kernel_cmd is not None:
            self.manager.kernel_cmd = kernel_cmd
        self.manager.start_kernel(env=env, cwd=str(cwd))
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=KERNEL_READY_TIMEOUT)
        self.pid = self.manager.provisioner.process.pid

    def run(self, code: str, timeout: float = CELL_TIMEOUT) -> CellResult:
        msg_id = self.client.execute(code)
        result = CellResult()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"cell did not finish in {timeout} s:\n{code}\n--- so far:\n{result.text}")
            try:
                msg = self.client.get_iopub_msg(timeout=left)
            except Exception:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            result.msg_types.append(kind)
            if kind == "status" and content["execution_state"] == "idle":
                result.status = self._reply_status(msg_id)
                return result
            if kind == "stream":
                if content["name"] == "stdout":
                    result.stdout += content["text"]
                else:
                    result.stderr += content["text"]
            elif kind in ("display_data", "update_display_data", "execute_result"):
                result.displays.append(content["data"])
            elif kind == "error":
                result.error = f"{content['ename']}: {content['evalue']}\n" + "\n".join(content["traceback"])

    def _reply_status(self, msg_id: str) -> str:
        while True:
            reply = self.client.get_shell_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"]["status"]

    def value(self, expression: str):
        """Evaluate ``expression`` in the kernel and return it (through repr/literal_eval)."""
        import ast

        result = self.run(f"print(repr({expression}))")
        assert not result.error, result.error
        return ast.literal_eval(result.stdout.strip())

    def shutdown(self) -> None:
        try:
            self.client.stop_channels()
            self.manager.shutdown_kernel(now=True)
        except Exception:
            pass


def wait_until(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def kill_leftovers(run_root: Path) -> list[int]:
    return kill_process_groups(processes_of_run_root(run_root))


@pytest.fixture(autouse=True)
def environment_is_left_as_found():
    """Fail a test that leaves os.environ changed: kernels started by later tests inherit it.

    (A leaked TF_USE_LEGACY_KERAS=1 once made every later Keras 3 and TF 2.15 Estimator run use tf_keras.)
    """
    before = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    yield
    after = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    if after != before:
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        for key in changed:
            if key in before:
                os.environ[key] = before[key]
            else:
                os.environ.pop(key, None)
        pytest.fail(f"the test left os.environ changed: {changed}")


@pytest.fixture
def run_root(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    root.mkdir()
    yield root
    kill_leftovers(root)


@pytest.fixture
def kernel_env(run_root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["NBWORKERS_RUN_ROOT"] = str(run_root)
    env["TF_CPP_MIN_LOG_LEVEL"] = "1"
    env["NBWORKERS_SPARES"] = "0"  # no warm spares unless a test asks (tests/test_spares.py): they cost CPU
    env["NBWORKERS_ZYGOTE"] = "0"  # no zygote (it outlives runs, like spares) unless a test asks (tests/test_zygote.py)
    env.pop("TF_CONFIG", None)
    return env


@pytest.fixture
def kernel(tmp_path: Path, kernel_env: dict[str, str], run_root: Path):
    """A real kernel (this interpreter's ipykernel) with nbworkers loaded, cwd in a temp notebook dir."""
    notebook_dir = tmp_path / "notebook"
    notebook_dir.mkdir()
    k = Kernel(notebook_dir, kernel_env, kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    k.notebook_dir = notebook_dir
    loaded = k.run("%load_ext nbworkers\nimport nbworkers")
    assert not loaded.error, loaded.error
    yield k
    k.shutdown()
    assert wait_until(lambda: not processes_of_run_root(run_root), 15), "worker processes outlived the kernel"
