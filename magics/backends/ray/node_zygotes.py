"""This kernel's zygotes on Ray nodes: one per (node, interpreter, import-time environment), so that a cold
``%%worker -n N --backend ray`` pays one TensorFlow import per node, and warm runs, restarts after a node loss
and sessions fork there instead of importing again (``nodes/zygote_actor.NbworkersNodeZygote`` is the node side).
Asked for as soon as Ray placed a group (``ask``), beside the worker hosts' actors. A node with no zygote yet and
one worker of the launch spawns that worker (a new zygote's import beside the worker's own would only compete
for the node's cores) and gets its zygote when the run ends (``prewarm``), for the next launches there.

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
from dataclasses import dataclass, field
from typing import Any

from nbworkers.magics.backends.ray.nodes.zygote_actor import NbworkersNodeZygote
from nbworkers.magics.backends.zygotes import import_env, why_not_forked, zygote_key
from nbworkers.magics.settings import settings as current_settings
from nbworkers.protocol import cell_scan, wire

NODE_PYTHON = "<the node's python>"  # the key's interpreter when the workers use each node's own
LATER_NOTE = ("spawned, not forked: this node has no zygote yet, and its one worker would wait as long for a new "
              "zygote's import as for its own; the zygote starts when this run ends, for the next launches here")


@dataclass
class Asked:
    """The zygotes asked for one launch: their key and, per node, (its actor, the pending ``start`` answer)."""

    key: str
    python: str
    forwarded: dict[str, str]
    refs: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    later: set[str] = field(default_factory=set)  # nodes whose zygote starts after the run (``prewarm``)


class NodeZygotes:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._actors: dict[tuple[str, str], Any] = {}
        self._pids: dict[str, int] = {}  # a zygote's socket on its node -> its pid there (the host checks its peer)

    def sockets_for(self, ray: Any, node_ids: list[str], python: str, env: dict[str, str],
                    forwarded: dict[str, str], cwd: str, timeout: float,
                    asked: Asked | None = None) -> list[tuple[str | None, str]]:
        """For each worker of a launch, on the node ``node_ids[i]``: (the zygote's socket there, "") or (None, why
        the worker is spawned). ``env``: a worker's whole environment (the cell's scan); ``forwarded``: what of it
        the nodes receive (the same for every worker of the launch but the per-run variables, which the key
        leaves out). ``asked``: what ``ask`` started while Ray placed the group, used when its key matches."""
        config = current_settings()
        if not config.zygote:
            return [(None, "")] * len(node_ids)
        reason = why_not_forked(env.get(wire.ENV_CODE, ""), cwd, cell_scan.from_env(env))
        if reason is not None:
            return [(None, f"spawned, not forked: {reason}")] * len(node_ids)
        if asked is None or asked.key != zygote_key(python or NODE_PYTHON, forwarded):
            asked = self.ask(ray, node_ids, python, forwarded)
        return self.answers(ray, asked, node_ids, timeout)

    def ask(self, ray: Any, node_ids: list[str], python: str, forwarded: dict[str, str],
            only_worth_it: bool = False) -> Asked:
        """Ask every node's zygote at once, without waiting (a new one starts an actor process and imports
        TensorFlow: in parallel on all nodes, and beside the worker hosts' own actors when asked at placement).
        ``only_worth_it``: a node with no zygote and one worker of the launch is left for later (``Asked.later``):
        a new zygote would import TensorFlow beside that worker's own import, on the same cores."""
        config = current_settings()
        key = zygote_key(python or NODE_PYTHON, forwarded)
        request = {"python": python, "env": import_env(forwarded), "idle_timeout": config.zygote_idle_timeout,
                   "marker": str(config.run_root)}
        asked = Asked(key, python, forwarded)
        with self._lock:
            for node_id in dict.fromkeys(node_ids):
                actor = self._actors.get((node_id, key))
                if actor is None and only_worth_it and node_ids.count(node_id) == 1:
                    asked.later.add(node_id)
                    continue
                if actor is None:
                    actor = self._actors[(node_id, key)] = self._new_actor(ray, node_id)
                # a socket name of its own per node (nodes may share a file system, or be one machine)
                name = f"{key[:8]}-{node_id[:8]}-{os.getpid()}-{secrets.token_hex(4)}"
                asked.refs[node_id] = (actor, actor.start.remote({**request, "name": name}))
        return asked

    def answers(self, ray: Any, asked: Asked, node_ids: list[str], timeout: float) -> list[tuple[str | None, str]]:
        """The answers to ``ask``, one per worker: the node's zygote socket (its workers wait for it to have
        imported TensorFlow, once), or None and why: left for later (``Asked.later``), or it could not start."""
        answers: dict[str, tuple[str | None, str]] = {}
        for node_id in dict.fromkeys(node_ids):
            if node_id in asked.later:
                answers[node_id] = None, LATER_NOTE
                continue
            if node_id not in asked.refs:  # placed elsewhere than asked: ask that node now
                asked.refs.update(self.ask(ray, [node_id], asked.python, asked.forwarded).refs)
            actor, ref = asked.refs[node_id]
            try:
                facts = ray.get(ref, timeout=timeout)
                answers[node_id] = facts["socket"], ""
                if isinstance(facts.get("pid"), int):
                    with self._lock:
                        self._pids[facts["socket"]] = facts["pid"]
            except Exception as error:  # its node is going away, or the actor could not start: spawn, once
                with self._lock:
                    self._actors.pop((node_id, asked.key), None)
                _kill(ray, actor)
                first = (str(error).strip().splitlines() or [type(error).__name__])[-1]
                why = f"no zygote on this node ({type(error).__name__}: {first})"
                answers[node_id] = None, f"spawned, not forked: {why}"
        return [answers[node_id] for node_id in node_ids]

    def pid_at(self, socket_path: str | None) -> int | None:
        """The pid, on its node, of the zygote listening at ``socket_path`` (None: not known)."""
        with self._lock:
            return self._pids.get(socket_path or "")

    def prewarm(self, ray: Any, asked: Asked) -> None:
        """Start the zygotes left for later (a run ended: its nodes are free), without waiting for them."""
        if asked.later:
            self.ask(ray, sorted(asked.later), asked.python, asked.forwarded)
            asked.later = set()

    @staticmethod
    def _new_actor(ray: Any, node_id: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return _actor_class(ray).options(
            num_cpus=0,  # no runtime_env: started without setup_worker.py (nodes/zygote_actor.py's docstring)
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
