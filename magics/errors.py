"""Each way a launch can fail before anything starts, its own exception; every message says what to do."""

from __future__ import annotations

from nbworkers.protocol.statuses import ClusterStatus


class LaunchError(ValueError):
    """The cell cannot be launched as asked; nothing was started."""


class CellSyntaxError(LaunchError):
    pass


class WorkerPythonError(LaunchError):
    pass


class ClusterNameError(LaunchError):
    pass


class PushError(LaunchError):
    pass


class RunFailed(RuntimeError):
    """A run the user waited for (``--block``, ``%workers wait``, ``Cluster.wait(raise_on_failure=True)``)
    ended failed or timed out: raised in the kernel so the cell fails and headless runs exit non-zero.

    Stopped by the user is not a failure and never raises this. ``name`` is the run (or session), ``workers``
    the indices of the workers that failed, ``status`` the run's final status.
    """

    def __init__(self, message: str, name: str = "", workers: tuple[int, ...] = (),
                 status: str = ClusterStatus.FAILED.value):
        super().__init__(message)
        self.name = name
        self.workers = tuple(workers)
        self.status = status

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it: the message alone (the workers' own frames are in it), not nbworkers'
        kernel-side frames (IPython honours this hook, as for ipyparallel's remote errors)."""
        lines = str(self).splitlines() or [""]
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {lines[0]}", *lines[1:]]


class IsolationUnavailable(LaunchError):
    """``isolation = 'required'`` and this machine cannot give the run a private network namespace."""


class CellStopped(KeyboardInterrupt):
    """The notebook's interrupt (■, ``interrupt_kernel``) reached a blocking wait for a session cell
    (``%%worker --session NAME --block``, ``%workers wait NAME``): the cell was stopped on every worker, as the
    widget's Stop does, and the notebook cell ends as interrupted. A ``KeyboardInterrupt``, so notebooks and
    ``nbconvert`` treat it as one; shown as its message alone (the stop note), never nbworkers' frames."""

    def _render_traceback_(self) -> list[str]:
        lines = str(self).splitlines() or [""]
        return [f"\x1b[0;31mKeyboardInterrupt\x1b[0m: {lines[0]}", *lines[1:]]
