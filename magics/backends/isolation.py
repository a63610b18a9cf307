"""The kernel's side of run isolation: one private network namespace per local run (``protocol/private/netns.py``).

``RunNamespace.start()`` starts the run's holder (``python -I -S protocol/private/netns.py``: its own session, a
pipe from the kernel on its stdin) and reads its answer; ``env()`` is what every worker of the run gets
(``$NBWORKERS_NETNS``: the worker joins before anything else); ``close()`` ends the holder (the namespace
lives on while a worker is still in it, and goes with the last one).

``namespace_for_run(mode)``: ``off`` — None; ``auto`` — the namespace, or None with a warning said once per
kernel when this machine cannot make one (the workers then run in the machine's namespace, as before);
``required`` — the namespace, or ``IsolationUnavailable`` naming why and what to do. It also returns why a run
is not isolated; ``auto``'s fall-back is said once per kernel in the cell that met it (stderr) and in the log.

``isolation_fact(backend)``: what a run records in ``state.json`` (``isolation``) and ``%workers`` shows:
``{"mode": "namespace"}`` or ``{"mode": "off", "reason": ...}``; a Ray run adds ``ray_tls``, ``"on"`` or ``"off
(why)"`` (``ray/nodes/tls.py``).
"""

from __future__ import annotations

import logging
import select
import subprocess
import sys
import time
from typing import Any

from nbworkers.magics.errors import IsolationUnavailable
from nbworkers.magics.shapes import Backend, IsolationFact
from nbworkers.protocol import env_settings
from nbworkers.protocol.private import netns
from nbworkers.protocol.private.dirs import runtime_dir

log = logging.getLogger("nbworkers")
_warned = False


class HolderFailed(OSError):
    """The holder could not make the namespace (its reason), or did not answer in time."""


class RunNamespace:
    def __init__(self, proc: subprocess.Popen, value: str):
        self.proc = proc
        self.value = value  # PID:USER_INODE:NET_INODE

    @classmethod
    def start(cls, timeout: float) -> "RunNamespace":
        proc = subprocess.Popen([sys.executable, "-I", "-S", netns.__file__], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                close_fds=True, cwd=str(runtime_dir("nbworkers-zygote")))
        assert proc.stdout is not None
        line = b""
        deadline = time.monotonic() + timeout
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = proc.stdout.read1(4096)  # type: ignore[attr-defined]  # a BufferedReader
            if not chunk:
                break
            line += chunk
        words = line.decode(errors="replace").split()
        if len(words) == 4 and words[0] == "ready":
            return cls(proc, ":".join(words[1:]))
        cls._end(proc)
        if words[:1] == ["unavailable"]:
            raise HolderFailed(" ".join(words[2:]) or "no reason given")
        raise HolderFailed(f"no answer within {timeout:g} s" if not line else f"it said {line[:200]!r}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def env(self) -> dict[str, str]:
        return {env_settings.NETNS.name: self.value}

    @staticmethod
    def _end(proc: subprocess.Popen) -> None:
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def close(self) -> None:
        self._end(self.proc)




def namespace_for_run(mode: str, timeout: float) -> tuple[RunNamespace | None, str]:
    """(the run's namespace as ``mode`` (``settings().isolation``) asks, or None; why not when None): see the
    module's docstring."""
    global _warned
    if mode == "off":
        return None, "isolation is off for this run (--isolation off / the isolation setting)"
    try:
        return RunNamespace.start(timeout), ""
    except OSError as error:
        reason = str(error)
    if mode == "required":
        raise IsolationUnavailable(
            f"isolation is required, but this machine cannot make a private network namespace for the run's "
            f"workers ({reason}). Enable unprivileged user namespaces (sysctl user.max_user_namespaces > 0; on "
            "Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0), or set nbworkers.settings().isolation = "
            "'auto' to run without it (other users on this machine can then reach the workers' TensorFlow ports).")
    why = f"no private network namespace could be made ({reason})"
    if not _warned:
        _warned = True
        text = (f"nbworkers: this run is not isolated: {why}. Its workers' TensorFlow servers listen on every "
                "interface, reachable by other users of this machine. Enable unprivileged user namespaces "
                "(sysctl user.max_user_namespaces > 0; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0)"
                ", or use --isolation required to refuse such runs. (Said once per kernel; `%workers` shows each "
                "run's isolation.)")
        log.warning("%s", text)
        print(text, file=sys.stderr, flush=True)  # in the cell that launched the run
    return None, why


def isolation_fact(backend: Backend) -> IsolationFact:
    """The run's isolation as ``state.json`` and ``%workers`` show it: the backend's ``isolation_fact()``."""
    return backend.isolation_fact()


def no_namespace(name: str) -> IsolationFact:
    """The fact of a backend that makes no private network namespace for its workers."""
    return {"mode": "off", "reason": f"the {name} backend makes no private network namespace"}


def isolation_text(fact: Any) -> str:
    """``namespace``, ``off (reason)`` (``; Ray's TLS: on`` for a Ray run), or ``?`` for a run that recorded none
    (older nbworkers)."""
    if not isinstance(fact, dict) or not fact.get("mode"):
        return "?"
    reason = fact.get("reason")
    text = f"{fact['mode']} ({reason})" if reason else str(fact["mode"])
    return f"{text}; Ray's TLS: {fact['ray_tls']}" if fact.get("ray_tls") else text  # a Ray run's (ray/nodes/tls.py)
