"""What a ``%%worker`` cell asked for, checked: the input of a cluster launch."""

from __future__ import annotations

from dataclasses import dataclass, field

from nbworkers.protocol.cell_scan import CellScan


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
    backend: str = "local"  # --backend: a registered backend's name (magics/backends/registry.py)
    framework: str = "tf"  # --framework: a registered framework's name (magics/frameworks/registry.py)
    framework_options: dict[str, object] = field(default_factory=dict)  # its flags' values, by their dest
    options: object = None  # that backend's options dataclass, filled from its flags (None: its defaults)
    min_workers: int | None = None  # --min-workers, an elastic group of min_workers..workers (None: fixed)
    max_restarts: int | None = None  # None: settings().max_restarts
    stall_timeout: float | None = None  # None: settings().stall_timeout; 0: no watchdog
    chief: bool = False  # --chief: a chief task besides the -n workers (implied by --ps)
    evaluator: int = 0  # --evaluator: 1 evaluator task, outside the training cluster
    ps: int = 0  # --ps N: N parameter servers (ParameterServerStrategy: the cell runs on the chief only)
    scan: CellScan | None = None  # what the cell uses, scanned once at launch (protocol/cell_scan.py)
