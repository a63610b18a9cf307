"""Does Ray's own transport run with TLS? A ``--backend ray`` run's security fact (``ray_tls`` in its isolation).

The kernel talks to the Ray head and the workers' actors through Ray's gRPC: the cell, pushed variables, the
workers' environment (the run's HMAC key, ``TF_CONFIG``) cross it. Ray encrypts it (mutual TLS) only when every
process of the cluster, the kernel (Ray's driver) included, runs with ``RAY_USE_TLS=1`` and
``RAY_TLS_SERVER_CERT``, ``RAY_TLS_SERVER_KEY`` and ``RAY_TLS_CA_CERT`` (Ray's ``ray._common.tls_utils``).

``tls_of(environ)``: whether one environment asks for TLS, and what is missing. ``ray_tls_fact(kernel, nodes)``:
``"on"`` when the kernel's environment and every node's (each actor reports its own: ``host_actor.where``) have it, else
``"off (why)"``; a node that does not say (an older actor, a malformed answer) counts as off: ``"off (node IP: the
node did not say)"``, said in the cell as any other off. ``say_once(fact)``: said once per kernel in the cell that
launched the run (stderr) and in the log: that it is on, or that it is off, what crosses in plain text, and what to
do (docs/ray.md, "Ray with TLS").
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger("nbworkers")
USE_TLS = "RAY_USE_TLS"
FILES = ("RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT")
_said = False


def tls_of(environ: Mapping[str, str]) -> tuple[bool, str]:
    """(TLS on, why not): ``RAY_USE_TLS`` 1/true and the three files named (Ray refuses to start without them)."""
    if environ.get(USE_TLS, "0").strip().lower() not in ("1", "true"):
        return False, f"{USE_TLS} is not set"
    missing = [name for name in FILES if not environ.get(name)]
    if missing:
        return False, f"{USE_TLS} is set but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not"
    return True, ""


NOT_SAID = "the node did not say"  # a node whose answer has no well-formed ``ray_tls``: TLS counts as off


def ray_tls_fact(kernel_env: Mapping[str, str] | None = None, nodes: Sequence[Mapping[str, Any]] = ()) -> str:
    """``"on"``, or ``"off (why)"``: the kernel's environment (``os.environ`` by default) and what each placed
    actor reported of its node's (``where()['ray_tls']``: ``[on, why]``, ``on`` a bool). A node that did not say,
    or said something else, is off (``NOT_SAID``): nothing is taken as encrypted unless it was said to be."""
    on, why = tls_of(os.environ if kernel_env is None else kernel_env)
    if not on:
        return f"off (the kernel: {why})"
    for place in nodes:
        said = place.get("ray_tls")
        if not (isinstance(said, (list, tuple)) and len(said) == 2 and isinstance(said[0], bool)):
            return f"off (node {place.get('ip', '?')}: {NOT_SAID})"
        if not said[0]:
            return f"off (node {place.get('ip', '?')}: {str(said[1])[:200]})"
    return "on"


def say_once(fact: str) -> None:
    """The first Ray run of this kernel says whether Ray's transport is encrypted (stderr: the cell; the log)."""
    global _said
    if _said:
        return
    _said = True
    if fact == "on":
        text = ("nbworkers: Ray runs with TLS here (RAY_USE_TLS): the cell, pushed variables and the workers' keys "
                "cross Ray's gRPC encrypted. (Said once per kernel; `%workers` shows each run's.)")
        log.info("%s", text)
    else:
        text = (f"nbworkers: Ray's transport is not encrypted: TLS is {fact}. The cell, pushed variables (--push) "
                "and the workers' environment, the run's HMAC key included, cross Ray's gRPC in plain text: anyone "
                "on the cluster's network can read them. Start every Ray node and this kernel with RAY_USE_TLS=1 "
                "and RAY_TLS_SERVER_CERT, RAY_TLS_SERVER_KEY, RAY_TLS_CA_CERT (docs/ray.md, \"Ray with TLS\"), or "
                "keep the cluster on a private network. (Said once per kernel; `%workers` shows each run's.)")
        log.info("%s", text)  # info: a warning would reach the cell a second time through logging's last resort
    print(text, file=sys.stderr, flush=True)
