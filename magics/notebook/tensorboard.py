"""``%workers tensorboard NAME``: TensorBoard on a run's summaries, shown inline, stopped with the kernel.

The workers write their summaries under ``<run dir>/tensorboard/<task>`` (``nbworkers.distlib.tensorboard``).
TensorBoard runs as its own process through ``procs/tied.py`` (so it is stopped when the kernel exits or dies,
even by ``kill -9``), on a port the OS picks; TensorBoard's own notebook support (``tensorboard.notebook``)
shows it in the cell, and the URL is printed (headless runs and other front ends). One TensorBoard per run
directory: asking again shows the running one. Importing this module does not import TensorBoard, and
nothing here imports TensorFlow (TensorBoard's own process may).
"""

from __future__ import annotations

import atexit
import importlib.util
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.rundir import layout as rundir

SERVING = re.compile(r"TensorBoard \S+ at (http://\S+?)/? \(Press CTRL\+C to quit\)")
LOG_FILE = rundir.TENSORBOARD_LOG_FILE


@dataclass
class TensorBoardProcess:
    logdir: Path
    url: str
    port: int
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
        log_path = rundir.tensorboard_log_path(run_dir)
        log = open(log_path, "wb")
        command = [sys.executable, "-m", "nbworkers.procs.tied", "--", sys.executable, "-m", "tensorboard.main",
                   "--logdir", str(logdir), "--port", "0", "--host", "localhost",
                   "--reload_interval", f"{reload_interval:g}"]
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        url = _wait_for_url(log_path, proc, start_timeout)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        started = TensorBoardProcess(logdir, url + "/", port, proc)
        _running[str(logdir)] = started
        return started


def _wait_for_url(log_path: Path, proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        found = SERVING.search(text)
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise LaunchError(f"TensorBoard exited at start (code {proc.returncode}):\n{text[-2000:]}")
        time.sleep(0.2)
    if proc.stdin is not None:
        proc.stdin.close()
    raise LaunchError(f"TensorBoard did not start within {timeout:g} s (settings().tensorboard_start_timeout); "
                      f"its output is in {log_path}.")


def show(board: TensorBoardProcess, height: int = 800) -> None:
    """Inline, through TensorBoard's own notebook support (an iframe on the port)."""
    from tensorboard import notebook

    notebook.display(port=board.port, height=height)


@atexit.register
def stop_all() -> None:
    with _lock:
        boards = list(_running.values())
        _running.clear()
    for board in boards:
        board.stop()
