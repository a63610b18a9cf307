"""Which tasks that training does not wait for are stopped, and when: pure, on the supervisor core's clock.

Servers (ParameterServerStrategy's workers and ps) never exit, an evaluator may watch for checkpoints forever: once
every awaited task of the attempt exited well, they are stopped (servers at once, the evaluator after
``evaluator_grace``: ``roles.due_for_retirement``) and the run then ends as finished (``supervisor.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from nbworkers.magics.launch import roles
from nbworkers.magics.launch.tfconfig import Task
from nbworkers.magics.run.core.events import Attempt
from nbworkers.magics.run.core.state import WorkerState


def due(tasks: list[Task], workers: Sequence[WorkerState], attempt: Attempt, now: float,
        evaluator_grace: float) -> list[int]:
    """The tasks to stop now (each once: noted in ``attempt.retired``); none while an awaited task has not exited
    with 0. The first time every awaited task has, ``attempt.training_ended_at`` is noted."""
    if not all(w.exit_code == 0 for t, w in zip(tasks, workers) if t.awaited):
        return []
    attempt.training_ended_at = attempt.training_ended_at or now
    ready = roles.due_for_retirement(tasks, now - attempt.training_ended_at, evaluator_grace)
    chosen = [i for i in ready if i not in attempt.retired and workers[i].exit_code is None]
    attempt.retired.update(chosen)
    return chosen
