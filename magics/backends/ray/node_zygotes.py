"""This kernel's zygotes on Ray nodes: one per (node, interpreter, import-time environment), so that a cold
``%%worker -n N --backend ray`` pays one TensorFlow import per node, and warm runs, restarts after a node loss
and sessions fork there instead of importing again (``node_zygote.NbworkersNodeZygote`` is the node side).

``sockets_for`` is asked by ``RayBackend.launch`` for the workers of a launch once Ray placed them: the zygote's
socket on each worker's node (its actor made on first use, pinned to the node; the zygote started again if it
exited idle), or None and why the worker is spawned: zygotes are off (``settings().zygote``), the cell changes its
environment before TensorFlow is imported (as locally, ``zygotes.why_not_forked``), or the zygote's actor could not
start.
The key is what the worker's import sees of the kernel: the interpreter asked for and the import-time variables
the kernel forwards to the node (``zygotes.import_env``); the rest of the environment is the node's own.

Kept for the kernel's life: the actors belong to the kernel (the Ray driver), so Ray ends them — and their
zygotes with them — when the kernel exits, even by ``kill -9``. A node lost takes its zygote with it; the next
launch on another node makes one there.
"""

from __future__ import annotations

import os
import secrets
import threading
from typing import Any

from nbworkers.magics.backends.ray.node import ACTOR_ENV
from nbworkers.magics.backends.ray.node_zygote import NbworkersNodeZygote
from nbworkers.magics.backends.zygotes import import_env, why_not_forked, zygote_key
from nbworkers.magics.settings import settings as current_settings
from nbworkers.protocol import cell_scan, wire

NODE_PYTHON = "<the node's python>"  # the key's interpreter when the workers use each node's own


class NodeZygotes:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._actors: dict[tuple[str, str], Any] = {}

    def sockets_for(self, ray: Any, node_ids: list[str], python: str, env: dict[str, str],
                    forwarded: dict[str, str], cwd: str, timeout: float) -> list[tuple[str | None, str]]:
        """For each worker of a launch, on the node ``node_ids[i]``: (the zygote's socket there, "") or (None, why
        the worker is spawned). Every node's zygote is asked at once (a new one starts an actor process and
        imports TensorFlow: in parallel on all nodes). ``env``: a worker's whole environment (the cell's scan);
        ``forwarded``: what of it the nodes receive (the same for every worker of the launch but the per-run
        variables, which the key leaves out)."""
        config = current_settings()
        if not config.zygote:
            return [(None, "")] * len(node_ids)
        reason = why_not_forked(env.get(wire.ENV_CODE, ""), cwd, cell_scan.from_env(env))
        if reason is not None:
            return [(None, f"spawned, not forked: {reason}")] * len(node_ids)
        key = zygote_key(python or NODE_PYTHON, forwarded)
        request = {"python": python, "env": import_env(forwarded), "idle_timeout": config.zygote_idle_timeout,
                   "marker": str(config.run_root)}
        answers: dict[str, tuple[str | None, str]] = {}
        with self._lock:
            asked = {}
            for node_id in dict.fromkeys(node_ids):
                actor = self._actors.get((node_id, key))
                if actor is None:
                    actor = self._actors[(node_id, key)] = self._new_actor(ray, node_id)
                # a socket name of its own per node (nodes may share a file system, or be one machine)
                name = f"{key[:8]}-{node_id[:8]}-{os.getpid()}-{secrets.token_hex(4)}"
                asked[node_id] = (actor, actor.start.remote({**request, "name": name}))
            for node_id, (actor, ref) in asked.items():
                try:
                    answers[node_id] = ray.get(ref, timeout=timeout)["socket"], ""
                except Exception as error:  # its node is going away, or the actor could not start: spawn, once
                    del self._actors[(node_id, key)]
                    _kill(ray, actor)
                    first = (str(error).strip().splitlines() or [type(error).__name__])[-1]
                    why = f"no zygote on this node ({type(error).__name__}: {first})"
                    answers[node_id] = None, f"spawned, not forked: {why}"
        return [answers[node_id] for node_id in node_ids]

    @staticmethod
    def _new_actor(ray: Any, node_id: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return _actor_class(ray).options(
            num_cpus=0, runtime_env={"env_vars": dict(ACTOR_ENV)},
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        ).remote()

    def actors(self) -> dict[tuple[str, str], Any]:
        """(node id, key) -> the zygote's actor (diagnosis and tests)."""
        with self._lock:
            return dict(self._actors)


_remote_class = None
_registry: NodeZygotes | None = None
_registry_lock = threading.Lock()


def _actor_class(ray: Any) -> Any:
    global _remote_class
    if _remote_class is None:
        _remote_class = ray.remote(max_concurrency=4, max_restarts=0)(NbworkersNodeZygote)
    return _remote_class


def _kill(ray: Any, actor: Any) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception:
        pass


def node_zygotes() -> NodeZygotes:
    """This kernel's zygotes on Ray nodes."""
    global _registry
    with _registry_lock:
        if _registry is None:
            _registry = NodeZygotes()
        return _registry
