"""Cluster roles on the kernel side: ``--chief``, ``--evaluator``, ``--ps N`` checked before anything starts,
the tasks they give, the environment that tells a task to serve, and when the unawaited tasks end.

What each role runs and what its ``TF_CONFIG`` holds: ``tfconfig``. What a worker does for its role:
``nbworkers.distlib.worker.roles``. Nothing here imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Iterable

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.tfconfig import Task, plan_tasks
from nbworkers.magics.settings import WorkerSettings
from nbworkers.protocol import env_settings
from nbworkers.protocol.cell_scan import code_names

ENV_SERVE = env_settings.SERVE.name  # "1": the task runs its TensorFlow server (read by distlib.worker.roles)

# Strategy class names a cell may use, by whether they use parameter servers.
PS_STRATEGIES = frozenset({"ParameterServerStrategy", "ParameterServerStrategyV2", "CentralStorageStrategy"})
NON_PS_STRATEGIES = frozenset({
    "MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy", "MirroredStrategy", "OneDeviceStrategy",
    "TPUStrategy",
})


class RoleError(LaunchError):
    """The roles asked for cannot work; nothing was started."""


def uses_estimator(names: set[str]) -> bool:
    """The cell trains with tf.estimator (which runs its own parameter-server roles: the cell runs on every task)."""
    return "estimator" in names or "train_and_evaluate" in names


def check_roles(workers: int, chief: bool, evaluator: int, ps: int | None, cell: str,
                names: Iterable[str] | None = None) -> None:
    """Raise RoleError, saying what to do, when the roles asked for cannot work with this cell (``names``: the
    identifiers of its code, from the launch's ``cell_scan``; scanned from ``cell`` when not given)."""
    in_code = set(code_names(cell) if names is None else names)
    strategies = in_code & (PS_STRATEGIES | NON_PS_STRATEGIES)
    if ps is not None and ps < 1:
        raise RoleError(
            f"--ps {ps}: give the number of parameter servers (1 or more), e.g. --ps 1, or leave --ps out "
            "for MultiWorkerMirroredStrategy."
        )
    if evaluator < 0 or evaluator > 1:
        raise RoleError(
            f"--evaluator {evaluator}: there can be at most one evaluator (TensorFlow's cluster layout allows "
            "one); use --evaluator alone."
        )
    if evaluator and workers < 1:
        raise RoleError(
            f"--evaluator with -n {workers}: the evaluator evaluates the checkpoints the training workers write, "
            "so there must be workers: give -n 1 or more."
        )
    if ps:
        if workers < 1:
            raise RoleError(
                f"--ps {ps} with -n {workers}: ParameterServerStrategy needs at least one worker for the "
                "coordinator (the chief) to drive: give -n 1 or more."
            )
        if strategies and not strategies & PS_STRATEGIES:
            used = ", ".join(sorted(strategies))
            raise RoleError(
                f"--ps {ps}: the cell uses {used}, which has no parameter servers. Drop --ps (and use --chief if "
                "you want a separate chief), or use tf.distribute.ParameterServerStrategy: the cell then runs on "
                "the chief (the coordinator) and the workers and parameter servers run TensorFlow servers."
            )
    elif in_code & {"ParameterServerStrategy", "ParameterServerStrategyV2"} and not strategies & NON_PS_STRATEGIES:
        raise RoleError(
            "the cell uses ParameterServerStrategy, which needs parameter servers and a coordinator: add --ps N "
            "(for example `%%worker -n 2 --ps 1`); the cell then runs on the chief and the workers and "
            "parameter servers run TensorFlow servers."
        )


def plan(workers: int, chief: bool = False, evaluator: int = 0, ps: int = 0, cell: str = "",
         names: Iterable[str] | None = None) -> list[Task]:
    """The tasks of a launch. With parameter servers the workers serve, unless the cell is an Estimator cell
    (``train_and_evaluate`` starts the parameter servers itself and runs on every task)."""
    servers = not uses_estimator(set(code_names(cell) if names is None else names)) if ps else False
    return plan_tasks(workers, chief=chief, evaluator=bool(evaluator), ps=ps or 0, servers=servers)


def task_env(task: Task) -> dict[str, str]:
    """Extra environment of one task's process: servers are told to serve instead of running the cell."""
    return {ENV_SERVE: "1"} if task.serves else {}


def evaluator_grace(config: WorkerSettings) -> float:
    """Seconds the evaluator may keep going after training ended (it evaluates the last checkpoint and usually
    exits by itself; Estimator's evaluator sleeps ``throttle_secs`` between evaluations and may never notice)."""
    return float(config.evaluator_grace)


def due_for_retirement(tasks: list[Task], since_training_ended: float, grace: float) -> list[int]:
    """Indices of the unawaited tasks to stop now that every awaited task finished: servers at once, the
    evaluator once ``grace`` seconds have passed (it may be evaluating the last checkpoint)."""
    due = []
    for i, task in enumerate(tasks):
        if task.awaited:
            continue
        if task.serves or since_training_ended >= grace:
            due.append(i)
    return due


def retirement_detail(task: Task) -> str:
    if task.serves:
        return "server stopped: the coordinator finished"
    return "stopped after training ended"

