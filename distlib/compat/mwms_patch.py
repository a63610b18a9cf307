"""Wrap MultiWorkerMirroredStrategy's multi-worker setup, ``CollectiveAllReduceExtended._initialize_multi_worker``,
with the worker side's hooks (``distlib.worker.mwms.strategy_setup``: status reports, leader wait, device check), and
read or set what those hooks need of the strategy's private state. Group ``mwms_patch`` in ``internals``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from nbworkers.distlib.compat import eager_context, internals
from nbworkers.distlib.compat.import_hooks import wrap_once

Before = Callable[[Any, Any], None]  # (cluster_resolver, extended) before the setup connects to the other workers
After = Callable[[Any, bool], None]  # (extended, executing eagerly) after it

_hooks: list[tuple[Before, After]] = []  # the one pair installed


@dataclass(frozen=True)
class StrategyShape:
    """What the device check compares between workers."""

    cluster: dict
    devices_per_worker: int
    device_type: str
    worker_id: int
    num_workers: int


def shape_of(extended: Any) -> StrategyShape:
    """The cluster, devices and this worker's place, as the strategy (``CollectiveAllReduceExtended``) holds them."""
    return StrategyShape(
        cluster=extended._cluster_spec.as_dict(),
        devices_per_worker=int(getattr(extended, "_num_devices_per_worker", 1)),
        device_type=str(getattr(extended, "_local_device_type", "CPU")),
        worker_id=int(getattr(extended, "_id_in_cluster", 0)),
        num_workers=int(getattr(extended, "_num_workers", 1)),
    )


def skip_second_server(extended: Any) -> None:
    """Collectives were started early for this cluster's server: the strategy must not start it again, and the
    coordination service watches the peers (as upstream does when it started the server itself)."""
    extended._std_server_started = True
    extended._enable_check_health = False


def _initialize_multi_worker(wrapped, extended, args, kwargs):
    """The wrapt wrapper of ``CollectiveAllReduceExtended._initialize_multi_worker(cluster_resolver)``."""
    before, after = _hooks[0]
    before(args[0] if args else kwargs["cluster_resolver"], extended)
    result = wrapped(*args, **kwargs)
    after(extended, eager_context.executing_eagerly())  # (graph mode: no device check)
    return result


def install(before: Before, after: After) -> None:
    """Install the wrapper with these hooks (idempotent: ``import_hooks.wrap_once``; the first pair stays)."""
    consequence = "no 'waiting' status, leader wait or GPU-count check for the strategy"
    if not (internals.available("mwms_patch", consequence) and eager_context.usable(consequence)):
        return
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars

    if not _hooks:
        _hooks.append((before, after))
    wrap_once(cars.CollectiveAllReduceExtended, "_initialize_multi_worker", _initialize_multi_worker)
