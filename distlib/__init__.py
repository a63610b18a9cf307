"""nbworkers.distlib: what runs inside a ``%%worker`` TensorFlow worker.

Importing this package does not import TensorFlow: every name below loads its module on first use.

Cluster:    task(), is_chief(), write_dir(path), TaskInfo, TFConfigError
Strategy:   strategy(communication="auto"), GpuCountMismatchError
Keras:      fit(model, dataset_or_fn, epochs=, steps_per_epoch=, callbacks=, checkpoint_dir=), use_tf_keras(),
            KerasFitUnderMultiWorkerError
Loops:      distributed_dataset(strategy, dataset_fn, global_batch_size), scale_loss(per_example_loss,
            global_batch_size), TrainingCheckpoint(directory, **trackables)
Data:       shard_for_worker(dataset), auto_shard(dataset, policy="data"), mnist(split), ENV_MOCK_DATA
Estimator:  run_config(strategy, model_dir=...), ReportHook(...), EstimatorUnavailableError (TF <= 2.15 only)
Reporting:  report(step=, epoch=, **metrics), ReportCallback(), flush_reports()
TensorBoard: tensorboard_dir(), TensorBoard(**kwargs) (report() metrics are written there too)
Sessions:   restore_session_state(names=None) (what a session saved before its processes restarted), NoSavedState,
            StateNotRestored
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    # name -> module (relative to this package) that defines it
    "task": "cluster",
    "is_chief": "cluster",
    "TaskInfo": "cluster",
    "TFConfigError": "cluster",
    "write_dir": "dirs",
    "WriteDir": "dirs",
    "strategy": "strategies",
    "GpuCountMismatchError": "collectives",
    "fit": "keras_fit",
    "FitError": "keras_fit",
    "use_tf_keras": "compat.keras3.fit_guard",
    "KerasFitUnderMultiWorkerError": "compat.keras3.fit_guard",
    "distributed_dataset": "custom_loop",
    "scale_loss": "custom_loop",
    "TrainingCheckpoint": "checkpoint",
    "check_shared": "shared_dir",
    "CheckpointDirNotShared": "shared_dir",
    "shard_for_worker": "data",
    "auto_shard": "data",
    "mnist": "data",
    "ENV_MOCK_DATA": "data",
    "run_config": "estimator",
    "ReportHook": "estimator",
    "EstimatorUnavailableError": "estimator",
    "report": "reporting",
    "ReportCallback": "reporting",
    "flush_reports": "reporting",
    "tensorboard_dir": "tensorboard",
    "TensorBoard": "tensorboard",
    "restore_session_state": "saved_state.namespace",
    "NoSavedState": "saved_state.namespace",
    "StateNotRestored": "saved_state.namespace",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module_name}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
