"""``%workers tensorboard NAME``: TensorBoard on a run's summaries, shown inline, stopped with the kernel.

The workers write their summaries under ``<run dir>/tensorboard/<task>`` (``nbworkers.distlib.tensorboard``).
TensorBoard runs as its own process through ``procs/tied.py`` (so it is stopped when the kernel exits or dies,
even by ``kill -9``), serving on a Unix socket in a private 0700 directory (``tensorboard_server``), never on a
TCP port: no other local user can reach it. The browser reaches it through the Jupyter server, behind the
notebook's own authentication: ``<base url>nbworkers/tensorboard/<name>/`` (``extension/tensorboard_proxy.py``,
which finds the socket through ``<run dir>/tensorboard.socket``). The cell shows it in an iframe and prints the
URL. One TensorBoard per run directory: asking again shows the running one. Importing this module does not
import TensorBoard, and nothing here imports TensorFlow (TensorBoard's own process may).
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.notebook.tensorboard_server import SERVING_LINE
from nbworkers.magics.rundir import layout as rundir
from nbworkers.protocol.private.dirs import module_command, socket_path, write_private
from nbworkers.protocol.private.files import open_own

LOG_FILE = rundir.TENSORBOARD_LOG_FILE
SOCKET_DIR_NAME = "nbworkers-tensorboard"  # under the user's private runtime directory
PROXY_PATH = "nbworkers/tensorboard"  # the Jupyter server's route (extension/tensorboard_proxy.py)


@dataclass
class TensorBoardProcess:
    logdir: Path
    url: str  # through the Jupyter server: <base url>nbworkers/tensorboard/<name>/
    socket_path: str  # where TensorBoard serves (only this user can connect)
    proc: subprocess.Popen  # the tied host (its child is TensorBoard)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Close the host's pipe: it stops TensorBoard's process group and exits."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_running: dict[str, TensorBoardProcess] = {}
_lock = threading.Lock()


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


def socket_path_for(run_dir: Path) -> Path:
    """The Unix socket of a run's TensorBoard: short (a socket path has at most 107 bytes), in a private dir."""
    digest = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]
    return socket_path(SOCKET_DIR_NAME, f"{digest}.sock")


def proxy_url(name: str) -> str:
    """Where the notebook's browser finds the run's TensorBoard: the Jupyter server's route, under JupyterHub's
    prefix when there is one (the kernel does not know the server's base URL otherwise)."""
    base = os.environ.get("JUPYTERHUB_SERVICE_PREFIX") or "/"
    return f"{base.rstrip('/')}/{PROXY_PATH}/{name}/"


def start(run_dir: Path, start_timeout: float, reload_interval: float = 5.0) -> TensorBoardProcess:
    """TensorBoard on ``run_dir/tensorboard`` (started, or the one already running); raises LaunchError."""
    if not tensorboard_available():
        raise LaunchError("TensorBoard is not installed in the kernel's environment: "
                          "`pip install \"nbworkers[tensorboard]\"` (or `pip install tensorboard`), then try again.")
    logdir = rundir.tensorboard_dir(run_dir)
    logdir.mkdir(parents=True, exist_ok=True)
    with _lock:
        known = _running.get(str(logdir))
        if known is not None and known.alive():
            return known
        socket_path = socket_path_for(run_dir)
        log_path = rundir.tensorboard_log_path(run_dir)
        with os.fdopen(open_own(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as log:
            command = [sys.executable, "-P", "-m", "nbworkers.procs.tied", "--",
                       *module_command(sys.executable, "nbworkers.magics.notebook.tensorboard_server",
                                       "--logdir", str(logdir), "--socket", str(socket_path),
                                       "--reload-interval", f"{reload_interval:g}")]
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=str(socket_path.parent))
        _wait_until_serving(log_path, proc, start_timeout)
        write_private(rundir.tensorboard_socket_file(run_dir), str(socket_path).encode())
        started = TensorBoardProcess(logdir, proxy_url(Path(run_dir).name), str(socket_path), proc)
        _running[str(logdir)] = started
        return started


def _wait_until_serving(log_path: Path, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        if SERVING_LINE in text:
            return
        if proc.poll() is not None:
            raise LaunchError(f"TensorBoard exited at start (code {proc.returncode}):\n{text[-2000:]}")
        time.sleep(0.2)
    if proc.stdin is not None:
        proc.stdin.close()
    raise LaunchError(f"TensorBoard did not start within {timeout:g} s (settings().tensorboard_start_timeout); "
                      f"its output is in {log_path}.")


def show(board: TensorBoardProcess, height: int = 800) -> None:
    """Inline: an iframe on the Jupyter server's route (the browser's own session with the server)."""
    from IPython.display import IFrame, display

    display(IFrame(board.url, width="100%", height=height))


@atexit.register
def stop_all() -> None:
    with _lock:
        boards = list(_running.values())
        _running.clear()
    for board in boards:
        board.stop()
