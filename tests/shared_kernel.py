"""One kernel for the tests of a module that asks for it (``pytestmark = pytest.mark.share_kernel``; conftest's
``kernel`` and ``run_root`` fixtures).

Why: a test's own kernel costs a kernel start and, at its first run, a zygote that imports TensorFlow (~7 s of CPU on
this 2-core machine, where `make test` is CPU-bound). The tests of one module share them instead.

What each test still gets is a kernel as a fresh one would be for it: after each test the kernel stops every run it
started (``%workers stop --all``, which lets the idle Ray worker groups go too), the settings go back to their
defaults (``configure`` from the IPython config, as ``%load_ext`` does), and no process of a run may be left. A test
that failed, killed its kernel or left a process behind ends the kernel (the next test gets a new one), so that a
failure never becomes two.

What stays between the tests of a module: the kernel's zygotes, its Python names, the run root and the notebook folder
with what finished runs left there. So a module's tests use run names of their own and look only at what they made.
A test that changes what the reset cannot give back (a module patched in the kernel, ``settings().config``, the
kernel's environment) or that needs a kernel's first run is marked ``own_kernel`` and gets its own kernel.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nbworkers.kernel_driver import KernelDriver, wait_until
from nbworkers.procs.strays import kill_strays, processes_under

SHARE_MARK = "share_kernel"
OWN_MARK = "own_kernel"
RESET_CELL = ("%workers stop --all\n"
              "from nbworkers.magics.settings import configure as _nbw_configure\n"
              "_nbw_configure(get_ipython().config)\n")
RESET_TIMEOUT = 120  # seconds for the reset cell: stopping runs waits up to each one's stop grace
LEFT_TIMEOUT = 15  # seconds for the processes of stopped runs to go
FAILED = pytest.StashKey[bool]()  # set on a test's item when one of its phases failed (conftest's report hook)


def shares_kernel(item: pytest.Item) -> bool:
    return item.get_closest_marker(SHARE_MARK) is not None and item.get_closest_marker(OWN_MARK) is None


class SharedKernel:
    """The kernel of one module's tests, started when the first test asks and started again after a failure."""

    def __init__(self, home: Path, start, run_processes):
        """``start(notebook_dir, env)``: a new kernel with nbworkers loaded; ``run_processes(run_root)``: the live
        processes of its runs, without its idle zygotes (conftest's ``start_kernel``, ``processes_of_run_root``)."""
        self.run_root = home / "runs"
        self.notebook_dir = home / "notebook"
        self.run_root.mkdir()
        self.notebook_dir.mkdir()
        self._start = start
        self._run_processes = run_processes
        self.kernel: KernelDriver | None = None

    def take(self, env: dict[str, str]) -> KernelDriver:
        if self.kernel is None:
            self.kernel = self._start(self.notebook_dir, env)
        return self.kernel

    def after_test(self, failed: bool) -> str | None:
        """Give the kernel back in a fresh one's state, or end it; what went wrong when the test left something."""
        kernel = self.kernel
        if kernel is None:
            return None
        if failed or kernel.manager.is_alive() is False:  # a failed test's kernel may be mid-cell; a killed one is gone
            return self.end()
        try:
            reset = kernel.run(RESET_CELL, timeout=RESET_TIMEOUT)
        except TimeoutError as error:
            self.end()
            return f"the shared kernel did not come back after the test: {error}"
        if reset.error:
            self.end()
            return f"the shared kernel's reset failed after the test:\n{reset.error}"
        if not wait_until(lambda: not self._run_processes(self.run_root), LEFT_TIMEOUT):
            left = self._run_processes(self.run_root)
            self.end()
            return f"processes of the test's runs were left after `%workers stop --all`: {left}"
        return None

    def end(self) -> str | None:
        """Shut the kernel down; what was left of it (and killed) when something outlived it."""
        kernel, self.kernel = self.kernel, None
        if kernel is None:
            return None
        kernel.shutdown()
        if wait_until(lambda: not processes_under(self.run_root), LEFT_TIMEOUT):
            return None
        return f"processes outlived the shared kernel (killed): {kill_strays(self.run_root)}"

