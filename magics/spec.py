"""What a ``%%worker`` cell asked for, checked: the input of a cluster launch."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LaunchSpec:
    code: str
    workers: int = 2
    name: str = ""
    python: str = ""  # the workers' interpreter
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    gpus_per_worker: int | None = None
    block: bool = False
    timeout: float | None = None
    push: dict[str, object] = field(default_factory=dict)
    backend: str = "local"
    max_restarts: int | None = None  # None: settings().max_restarts
    stall_timeout: float | None = None  # None: settings().stall_timeout; 0: no watchdog
