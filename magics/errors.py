"""Each way a launch can fail before anything starts, its own exception; every message says what to do."""

from __future__ import annotations


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
