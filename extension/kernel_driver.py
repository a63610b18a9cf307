"""Drive a real IPython kernel from Python through jupyter_client: start it, run cells, read what they showed.

One driver for everything that runs notebook cells without a notebook: the tests (``tests/conftest.py``'s
``kernel`` fixture and the kernelspec / leftover tests), the benchmarks (``benchmarks/run.py``) and the demo
(``nbworkers.demo``). Headless whole-notebook runs use nbclient instead (tests/integration/test_tutorials.py).

    kernel = KernelDriver(cwd, env)             # this interpreter's ipykernel, or kernel_name=... (a kernelspec)
    result = kernel.run("%load_ext nbworkers")  # a CellResult: stdout, stderr, error, displays, status
    text = kernel.output("print(1)")            # stdout; raises CellFailed when the cell raised
    kernel.value("1 + 1")                       # 2 (through repr / ast.literal_eval)
    kernel.shutdown()

Nothing here imports TensorFlow; jupyter_client is imported when a kernel starts.
"""

from __future__ import annotations

import ast
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KERNEL_READY_TIMEOUT = 90.0  # seconds for a fresh kernel to answer
CELL_TIMEOUT = 300.0  # seconds for one cell (a real 2-worker TensorFlow run on 2 cores)
REPLY_TIMEOUT = 30.0  # seconds for the execute_reply once the kernel is idle again
SHOWN = ("display_data", "update_display_data", "execute_result")


def wait_until(predicate, timeout: float, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something true (returned) or ``timeout`` seconds pass (its last value)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(interval)
    return predicate()


class CellFailed(RuntimeError):
    """A cell raised (or ended with an error reply); the message holds what it showed."""

    def __init__(self, message: str, result: CellResult):
        super().__init__(message)
        self.result = result


@dataclass
class CellResult:
    stdout: str = ""
    stderr: str = ""
    error: str = ""  # ename: evalue plus the traceback text, when the cell raised
    error_line: str = ""  # ename: evalue only
    displays: list[dict] = field(default_factory=list)  # display_data/update_display_data/execute_result data
    msg_types: list[str] = field(default_factory=list)
    status: str = ""  # the execute_reply's status: ok, error or aborted
    execution_count: int | None = None  # the execute_reply's: the cell's [N] as a notebook shows it

    @property
    def failure(self) -> str:
        """What the user saw of a failed cell: a traceback, or a UsageError's message (shown on stderr)."""
        return self.error or (self.stderr if self.status == "error" else "")

    @property
    def shown(self) -> str:
        """The text/plain of every display, one per line."""
        return "\n".join(d.get("text/plain", "") for d in self.displays)

    @property
    def text(self) -> str:
        """Everything shown, as plain text: streams, errors and the last of every display."""
        shown = [d.get("text/plain", "") for d in self.displays]
        return "\n".join([self.stdout, self.stderr, self.error, *shown])


class KernelDriver:
    """A real ipykernel subprocess and a blocking client on it."""

    def __init__(self, cwd: Path | str, env: dict[str, str], *, kernel_name: str = "python3",
                 kernel_dirs: list[str] | None = None, python: str | None = None, kernel_cmd: list[str] | None = None,
                 ready_timeout: float = KERNEL_READY_TIMEOUT, log_path: Path | None = None):
        """``kernel_dirs``: start the kernelspec ``kernel_name`` found there (e.g. nbworkers' own); otherwise
        ``kernel_cmd``, by default ``python -m ipykernel_launcher`` (this interpreter unless ``python``).
        ``log_path``: the kernel's own stdout/stderr go there (quoted by ``log_tail``)."""
        from jupyter_client import KernelManager

        options: dict[str, Any] = {"kernel_name": kernel_name}
        if kernel_dirs is not None:
            from jupyter_client.kernelspec import KernelSpecManager

            options["kernel_spec_manager"] = KernelSpecManager(kernel_dirs=kernel_dirs)
        self.manager = KernelManager(**options)
        if kernel_dirs is None:
            command = kernel_cmd or [python or sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
            self.manager.kernel_cmd = command  # type: ignore[attr-defined]  # deprecated in jupyter_client, still read
        self.log_path = Path(log_path) if log_path is not None else None
        self._log = open(self.log_path, "wb") if self.log_path is not None else None
        streams: dict[str, Any] = {"stdout": self._log, "stderr": self._log} if self._log is not None else {}
        self.manager.start_kernel(env=env, cwd=str(cwd), **streams)
        self.pid: int = self.manager.provisioner.process.pid  # type: ignore[union-attr]  # a local kernel
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=ready_timeout)

    # ------------------------------------------------------------------------------------------ cells
    def send(self, code: str) -> str:
        """Start executing ``code``; the message id to ``collect`` its output with."""
        return self.client.execute(code)

    def collect(self, msg_id: str, timeout: float = CELL_TIMEOUT, code: str = "") -> CellResult:
        """Everything the cell ``msg_id`` shows until the kernel is idle again (TimeoutError after ``timeout``)."""
        result = CellResult()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"cell did not finish in {timeout:g} s:\n{code[:500]}\n--- so far:\n{result.text}")
            try:
                msg = self.client.get_iopub_msg(timeout=left)
            except Exception:  # queue.Empty: look at the deadline again
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            result.msg_types.append(kind)
            if kind == "status" and content["execution_state"] == "idle":
                result.status, result.execution_count = self._reply(msg_id)
                return result
            if kind == "stream":
                if content["name"] == "stdout":
                    result.stdout += content["text"]
                else:
                    result.stderr += content["text"]
            elif kind in SHOWN:
                result.displays.append(content["data"])
            elif kind == "error":
                result.error_line = f"{content['ename']}: {content['evalue']}"
                result.error = result.error_line + "\n" + "\n".join(content["traceback"])

    def _reply(self, msg_id: str) -> tuple[str, int | None]:
        """The execute_reply's status and execution count."""
        while True:
            reply = self.client.get_shell_msg(timeout=REPLY_TIMEOUT)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"]["status"], reply["content"].get("execution_count")

    def run(self, code: str, timeout: float = CELL_TIMEOUT) -> CellResult:
        """Execute ``code`` and return what it showed (whether or not it raised)."""
        return self.collect(self.send(code), timeout, code)

    def output(self, code: str, timeout: float = CELL_TIMEOUT) -> str:
        """Execute ``code`` and return its stdout; CellFailed (with what it showed) when it raised."""
        result = self.collect(self.send(code), timeout, code)  # (not self.run: subclasses may change run)
        if result.error or result.status not in ("ok", ""):
            shown = (result.stderr + "\n" + result.error).strip()[-3000:]
            raise CellFailed(f"a kernel cell failed:\n{shown}\n--- the cell:\n{code[:300]}\n{self.log_tail()}".rstrip(),
                             result)
        return result.stdout

    def value(self, expression: str, timeout: float = CELL_TIMEOUT) -> Any:
        """Evaluate ``expression`` in the kernel and return it (its repr, read back with ast.literal_eval)."""
        lines = self.output(f"print(repr({expression}))", timeout).strip().splitlines()
        return ast.literal_eval(lines[-1])

    # ------------------------------------------------------------------------------------------ the kernel
    def log_tail(self, lines: int = 20) -> str:
        """The end of the kernel's own output (when started with ``log_path``)."""
        if self.log_path is None:
            return ""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "kernel log:\n" + "\n".join(text.splitlines()[-lines:]) if text.strip() else ""

    def shutdown(self, now: bool = True) -> None:
        """Stop the channels and the kernel (``now=False``: ask it to shut down first, then force)."""
        try:
            self.client.stop_channels()
        except Exception:
            pass
        try:
            self.manager.shutdown_kernel(now=now)
        except Exception:
            try:
                self.manager.shutdown_kernel(now=True)
            except Exception:
                pass
        if self._log is not None:
            self._log.close()
