"""``--backend ray``'s options: what its flags (``kind.py``) fill, what ``RayBackend.from_spec`` reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RayOptions:
    address: str = ""  # --address HOST:PORT; "": RAY_ADDRESS or the cluster started on this machine
    cpus_per_worker: float | None = None  # CPUs Ray reserves per worker (None: 1)
    spread: bool = False  # at most one worker per node (STRICT_SPREAD placement)
