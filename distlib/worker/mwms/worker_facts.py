"""Exchange small facts between workers through TensorFlow's coordination service key-value store
(``compat/eager_context.py``).

Used right after a MultiWorkerMirroredStrategy is built (the coordination service is up then) to check
that every worker sees the same number of GPUs and the same cluster, before any collective runs. It uses
no collective op, so a mismatch is reported instead of hanging inside one.
"""

from __future__ import annotations

import itertools
import json

from nbworkers.distlib.compat import eager_context
from nbworkers.protocol import env_settings

ENV_EXCHANGE_TIMEOUT = env_settings.FACTS_TIMEOUT.name
DEFAULT_EXCHANGE_TIMEOUT_S = env_settings.FACTS_TIMEOUT.default  # how long a worker waits for the others' facts
KEY_PREFIX = "nbworkers/facts"

_exchange_counter = itertools.count()  # every worker builds its strategies in the same order


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else ""


def exchange_timeout_s() -> float:
    return env_settings.FACTS_TIMEOUT.get()


def coordination_service_available() -> bool:
    return eager_context.coordination_service_running("the workers' GPU counts are not compared")


def exchange(local_facts: dict, worker_id: int, num_workers: int, timeout_s: float | None = None) -> list[dict]:
    """Publish ``local_facts`` as worker ``worker_id`` and return all ``num_workers`` workers' facts, in order."""
    round_id = next(_exchange_counter)
    eager_context.store_put(f"{KEY_PREFIX}/{round_id}/{worker_id}", json.dumps(local_facts))
    timeout_ms = int((exchange_timeout_s() if timeout_s is None else timeout_s) * 1000)
    facts: list[dict] = []
    for other in range(num_workers):
        key = f"{KEY_PREFIX}/{round_id}/{other}"
        try:
            value = eager_context.store_get(key, timeout_ms)
        except Exception as error:  # DeadlineExceeded and friends
            raise TimeoutError(
                f"could not get worker {other}'s device facts (waited up to {timeout_ms / 1000:.0f} s):"
                f" {type(error).__name__}: {_first_line(error)}. Is every worker running the same code, and"
                f" still alive? ({ENV_EXCHANGE_TIMEOUT} sets the wait.)"
            ) from None
        facts.append(json.loads(value))
    try:  # nobody leaves before all have read: the store lives in the leader's process
        eager_context.barrier(f"{KEY_PREFIX}/{round_id}/read", timeout_ms)
    except Exception as error:
        raise TimeoutError(
            f"not every worker finished the device-facts exchange (waited up to {timeout_ms / 1000:.0f} s):"
            f" {type(error).__name__}: {_first_line(error)}. ({ENV_EXCHANGE_TIMEOUT} sets the wait.)"
        ) from None
    return facts
