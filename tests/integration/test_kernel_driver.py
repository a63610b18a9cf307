"""nbworkers.kernel_driver, the one kernel driver of the tests, the benchmarks and the demo: a real kernel."""

from __future__ import annotations

import os

import pytest

from nbworkers.kernel_driver import CellFailed, KernelDriver


def test_a_cell_shows_streams_displays_and_errors(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    kernel = KernelDriver(tmp_path, env, log_path=tmp_path / "kernel.log")
    try:
        shown = kernel.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\n"
                           "from IPython.display import display\ndisplay('shown')\n41 + 1")
        assert (shown.stdout, shown.stderr, shown.status, shown.error) == ("out\n", "err\n", "ok", "")
        assert shown.shown.splitlines() == ["'shown'", "42"] and "execute_result" in shown.msg_types
        raised = kernel.run("raise ValueError('boom')")
        assert raised.status == "error" and raised.error_line == "ValueError: boom" and "Traceback" in raised.failure
        assert kernel.value("{'a': [1, 2]}") == {"a": [1, 2]}
        assert kernel.output("print('fine')") == "fine\n"
        with pytest.raises(CellFailed, match="ZeroDivisionError") as failed:
            kernel.output("1 / 0")
        assert failed.value.result.status == "error"
        with pytest.raises(TimeoutError, match="did not finish"):
            kernel.run("import time; time.sleep(5)", timeout=0.5)
        assert os.getcwd() != str(tmp_path) and kernel.value("__import__('os').getcwd()") == str(tmp_path)
    finally:
        kernel.shutdown()
    assert kernel.manager.provisioner is None or not kernel.manager.is_alive()
