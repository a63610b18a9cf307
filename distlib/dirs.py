"""Where a worker writes: the chief writes the real directory, every other worker a private temporary one.

Under MultiWorkerMirroredStrategy every worker must take part in ``model.save`` / ``checkpoint.save`` (they
run collectives), but only the chief's files should land in the user's directory. This is the tutorials'
``write_filepath`` pattern: ``with write_dir(path) as target: model.save(target)``. A non-chief's private
directory is removed when the ``with`` block ends (or on ``cleanup()``, or at interpreter exit).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from nbworkers.distlib.cluster import TaskInfo, task

_PENDING_CLEANUP: set[str] = set()


def _remove_all_pending() -> None:
    for path in list(_PENDING_CLEANUP):
        shutil.rmtree(path, ignore_errors=True)
    _PENDING_CLEANUP.clear()


atexit.register(_remove_all_pending)


class WriteDir(os.PathLike):
    """A directory to write into: ``path`` is the real one on the chief, a private temp dir elsewhere."""

    def __init__(self, requested: str, info: TaskInfo):
        self.requested = os.fspath(requested)
        self.is_private = not info.is_chief
        if self.is_private:
            self.path = tempfile.mkdtemp(prefix=f"nbworkers-{info.type}{info.index}-")
            _PENDING_CLEANUP.add(self.path)
        else:
            self.path = self.requested
            if "://" not in self.path:  # local path (gs://, hdfs://... are made by TensorFlow on write)
                os.makedirs(self.path, exist_ok=True)

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"WriteDir({self.path!r}, private={self.is_private})"

    def join(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def cleanup(self) -> None:
        """Remove a non-chief's private directory (the chief's real one is kept)."""
        if self.is_private:
            shutil.rmtree(self.path, ignore_errors=True)
            _PENDING_CLEANUP.discard(self.path)

    def __enter__(self) -> "WriteDir":
        if self.is_private:
            os.makedirs(self.path, exist_ok=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def write_dir(path: str | os.PathLike, info: TaskInfo | None = None) -> WriteDir:
    """The directory this worker should write ``path``'s content to (see the module docstring)."""
    return WriteDir(os.fspath(path), info or task())
