"""The tasks of a cluster (TensorFlow's roles); their ``TF_CONFIG``: ``magics/frameworks/tensorflow.py``.

Roles (TF_CONFIG task types) and who runs what:

- ``chief`` (``--chief``, implied by ``--ps``): one task that takes the chief's duties (checkpoints, summaries)
  instead of worker 0. Under ParameterServerStrategy it is the *coordinator*: the only task that runs the cell.
- ``worker`` (``-n N``): training tasks. Under ParameterServerStrategy they run a standard TensorFlow server
  the coordinator drives (``serves``), not the cell.
- ``ps`` (``--ps N``): parameter servers; always servers.
- ``evaluator`` (``--evaluator``): at most one, *outside* the training cluster: its TF_CONFIG has task type
  ``evaluator`` and the training cluster (chief/worker/ps) without an ``evaluator`` entry, as Estimator's
  ``train_and_evaluate`` documents and its ``RunConfig`` expects ("Evaluator is a special task that is not part of
  the training cluster"). It runs the cell (Estimator evaluates checkpoints as the training tasks write them).

Order of the processes (their ``NBWORKERS_WORKER`` index): chief, workers, parameter servers, evaluator.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    """One process of the cluster: its role (TF_CONFIG task type) and index within that role.

    ``serves``: the process runs a TensorFlow server (ParameterServerStrategy's workers and parameter servers)
    instead of the cell; it never exits on its own.
    """

    role: str
    index: int
    serves: bool = False

    @property
    def awaited(self) -> bool:
        """Whether the run waits for this process to exit. Servers and the evaluator (which may watch for
        checkpoints forever) are not awaited: once every awaited task finished, they are stopped."""
        return not self.serves and self.role != "evaluator"

    @property
    def label(self) -> str:
        return f"{self.role} {self.index}"


def plan_tasks(workers: int, chief: bool = False, evaluator: bool = False, ps: int = 0,
               servers: bool | None = None) -> list[Task]:
    """The processes of a cluster, in launch order (see the module docstring).

    ``servers``: whether, with parameter servers, the workers run TensorFlow servers instead of the cell
    (ParameterServerStrategy in TF2; default). False keeps the cell on every task, for Estimator's own
    parameter-server training, where the cell itself starts the servers (``train_and_evaluate`` does).
    """
    servers = ps > 0 if servers is None else servers and ps > 0
    tasks: list[Task] = []
    if chief or ps:
        tasks.append(Task("chief", 0))
    tasks += [Task("worker", i, serves=servers) for i in range(workers)]
    tasks += [Task("ps", i, serves=servers) for i in range(ps)]
    if evaluator:
        tasks.append(Task("evaluator", 0))
    return tasks
