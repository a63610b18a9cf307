"""Prewarm on Ray (magics/backends/ray/groups/prewarm.py): which nodes get a zygote at ``%load_ext`` with ``RAY_ADDRESS`` set,
with which key, and when it is off. Ray itself is faked: no process starts here."""

from __future__ import annotations

import nbworkers.magics.backends.ray.groups.pool as pool_module
import nbworkers.magics.backends.ray.node_zygotes as node_zygotes_module
import nbworkers.magics.settings as settings_module
from nbworkers.magics.backends.ray.backend import RayBackend
from nbworkers.magics.backends.ray.groups import prewarm, spares
from nbworkers.magics.backends.ray.groups.pool import ActorPool
from nbworkers.magics.settings import WorkerSettings

NODES = [
    {"NodeID": "head", "Alive": True, "Resources": {"memory": 1.0}},  # a head without CPUs: no worker lands there
    {"NodeID": "n1", "Alive": True, "Resources": {"CPU": 1.0}},
    {"NodeID": "gone", "Alive": False, "Resources": {"CPU": 4.0}},
    {"NodeID": "n2", "Alive": True, "Resources": {"CPU": 0.5, "GPU": 1.0}},
]


class FakeRay:
    def nodes(self):
        return NODES


class Registry:
    def __init__(self) -> None:
        self.asked: list[tuple] = []

    def ask(self, ray, node_ids, python, forwarded, only_worth_it=False):
        self.asked.append((list(node_ids), python, forwarded, only_worth_it))


def test_the_live_nodes_with_cpus_get_the_zygote_a_default_run_forks_from_and_a_spare_host(monkeypatch):
    registry = Registry()
    monkeypatch.setattr(node_zygotes_module, "node_zygotes", lambda: registry)
    monkeypatch.setattr(pool_module, "_pool", ActorPool())
    made = []
    monkeypatch.setattr(spares, "_new_spare", lambda ray, node_id: made.append(node_id) or f"spare-{node_id}")
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")  # an import-time variable of the kernel: forwarded, in the key
    backend = RayBackend(address="127.0.0.1:6379")
    assert prewarm.prewarm_on(FakeRay(), backend) == ["n1", "n2"]
    (nodes, python, forwarded, _), = registry.asked
    assert (nodes, python) == (["n1", "n2"], "")  # each node's own interpreter
    assert (python, forwarded) == backend.zygote_request()  # what a run of this kernel asks for: the same key
    assert forwarded["TF_USE_LEGACY_KERAS"] == "1"
    assert made == ["n1", "n2"] and pool_module.actor_pool().count_spares() == 2  # groups/spares.py
    assert pool_module.actor_pool().drain() == 2


def test_no_prewarm_without_an_address_or_with_prewarm_or_zygotes_off(monkeypatch):
    started = []
    monkeypatch.setattr(prewarm.threading, "Thread", lambda **kw: started.append(kw))
    monkeypatch.setattr(settings_module, "_settings", WorkerSettings(zygote_prewarm=False))
    assert prewarm.prewarm_nodes("127.0.0.1:6379") is None
    monkeypatch.setattr(settings_module, "_settings", WorkerSettings(zygote=False))
    assert prewarm.prewarm_nodes("127.0.0.1:6379") is None
    monkeypatch.setattr(settings_module, "_settings", WorkerSettings())
    assert prewarm.prewarm_nodes("") is None
    assert started == []
