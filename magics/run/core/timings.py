"""The supervisor core's timeouts (``Timings``), one named setting each (magics/settings.py), taken from the
settings and the run's flags once per run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nbworkers.magics.launch import roles


@dataclass(frozen=True)
class Timings:
    """The supervisor's timeouts, in seconds (magics/settings.py; the run's flags override some)."""

    stop_grace: float = 5.0
    stall_timeout: float = 0.0  # 0: no watchdog
    stack_dump_wait: float = 3.0
    evaluator_grace: float = 60.0
    run_timeout: float = 0.0  # --timeout; 0: none
    kill_margin: float = 2.0  # stop_kill_margin: beyond stop_grace, the supervisor kills what is left

    @classmethod
    def from_settings(cls, settings: Any, stall_timeout: float | None = None,
                      run_timeout: float | None = None) -> "Timings":
        return cls(
            stop_grace=settings.stop_grace,
            stall_timeout=stall_timeout if stall_timeout is not None else settings.stall_timeout,
            stack_dump_wait=settings.stack_dump_wait,
            evaluator_grace=roles.evaluator_grace(settings),
            run_timeout=run_timeout or 0.0,
            kill_margin=settings.stop_kill_margin,
        )
