"""Ray's actors and placement groups as the Ray backend (``backend.py``) uses them: the actor class made once per
kernel, killing an actor and removing a placement group without raising, the SIGTERM handler Ray's start
replaces, and what to tell the user when the actors could not start. Ray is passed in, never imported here."""

from __future__ import annotations

import signal
import threading

from nbworkers.magics.backends.ray.checks import INSTALL_HINT
from nbworkers.magics.backends.ray.nodes.host_actor import NbworkersWorkerHost

_remote_class = None


def actor_class(ray):
    """The actor class, made once per kernel (threaded: ``wait`` blocks while other calls answer)."""
    global _remote_class
    if _remote_class is None:
        _remote_class = ray.remote(max_concurrency=8, max_restarts=0)(NbworkersWorkerHost)
    return _remote_class


def sigterm_handler():
    return signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None


def restore_sigterm(handler) -> None:
    if handler is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def kill_actor(ray, actor) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception:
        pass


def remove_placement_group(ray, group) -> None:
    try:
        ray.util.remove_placement_group(group)
    except Exception:
        pass


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[-1] if text else ''}"


def actor_failure(error: BaseException, timeout: float) -> str:
    text = str(error)
    if "No module named" in text and "nbworkers" in text:
        return (f"nbworkers is not installed on a Ray node ({first_line(error)}). Install the same nbworkers"
                f" (`{INSTALL_HINT}`) in the Python environment Ray runs there. Nothing was started.")
    if "GetTimeoutError" in type(error).__name__ or "Timed out" in text:
        return (f"the worker host actors did not start within {timeout:g} s (c.RaySettings.actor_start_timeout)."
                " Nothing was started.")
    return f"the worker host actors could not start: {first_line(error)}. Nothing was started."

