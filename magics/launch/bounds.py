"""Bounds on ``%%worker`` flags that a plain type check lets through (a typo must not start 10 000 processes):
an upper limit on the number of tasks (``max_workers``, a setting), finite non-negative ``--timeout`` and
``--stall-timeout``; and the names already used under the run root (by any kernel), so that a fresh name never
lands on another kernel's run."""

from __future__ import annotations

import math
import os
from argparse import Namespace

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.settings import settings


def check_bounds(args: Namespace) -> None:
    limit = settings().max_workers
    tasks = args.workers + (getattr(args, "ps", None) or 0) + (1 if getattr(args, "chief", False) else 0) + (
        getattr(args, "evaluator", 0) or 0)
    if tasks > limit:
        raise LaunchError(
            f"-n {args.workers}: {tasks} tasks is more than the limit of {limit} (the max_workers setting). Raise it "
            f"if you mean it: `nbworkers.settings().max_workers = {tasks}` or c.WorkerSettings.max_workers in the "
            "IPython config."
        )
    for flag, value in (("--timeout", args.timeout), ("--stall-timeout", args.stall_timeout)):
        if value is not None and (not math.isfinite(value) or value < 0):
            raise LaunchError(f"{flag} {value}: give a finite number of seconds (0 or more), for example {flag} 600.")


def existing_run_names() -> set[str]:
    """Names of the run directories under the run root (this kernel's and every other's)."""
    try:
        return set(os.listdir(settings().run_root))
    except OSError:
        return set()
