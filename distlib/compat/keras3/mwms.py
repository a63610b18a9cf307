"""Keras 3's own ``model.fit`` / ``evaluate`` / ``predict`` under MultiWorkerMirroredStrategy.

Works around keras-team/keras#20585 and tensorflow/tensorflow#72388: on TensorFlow >= 2.16 (``tf.keras`` is
Keras 3) ``model.fit`` fails under MultiWorkerMirroredStrategy in two places of
``keras/src/backend/tensorflow/trainer.py``:

1. ``TensorFlowTrainer._maybe_symbolic_build`` builds the model from the first batch, which it "reduces" with
   ``strategy.reduce("MEAN", batch)``: an all-reduce of the *data* (``ValueError: Attempt to convert a value
   (PerReplica...)``). Fix: build from one local replica's batch (only shapes and dtypes matter).
2. ``reduce_per_replica`` reduces the step's outputs (loss, metrics: scalars) with
   ``strategy.reduce("MEAN", v, axis=0)``: ``Invalid reduction dimension 0`` on a rank-0 value. Fix: reduce
   rank-0 values with ``axis=None``, an all-reduce MEAN over the replicas of every worker. The logs are then
   the metrics over the global batch, the same on every worker (exact for equal per-replica batches; the
   epoch-end logs come from Keras's sync-on-read metric variables, summed over all workers: exact).

Plus one multi-worker hazard the upstream callback has: ``keras.callbacks.BackupAndRestore`` makes every worker
write the same ``latest.weights.h5`` (HDF5 refuses the second writer, or the files get mixed). Under a
multi-worker strategy the non-chief workers write a private temporary directory instead (the tutorials'
``write_filepath`` pattern, ``distlib.write_dir``); every worker restores from the chief's directory.

Not fixed: ``steps_per_execution > 1`` (Keras runs the steps in a ``tf.while_loop`` around a ``tf.cond``,
where the gradients' all-reduce fails, with or without this fix): ``fit``/``evaluate`` raise
``StepsPerExecutionUnderMultiWorkerError`` saying so before the first step.

Known needed and checked correct on: TensorFlow 2.21.0 with Keras 3.15.1 (tests/integration/test_keras3_fit.py).
Known needed on Keras 3.16.0-dev too (the same two corrections were checked there by hand), and reported upstream
since TensorFlow 2.16 (``KNOWN_NEEDED_ON``). Steps aside by itself: ``patch_trainer()`` patches only when the
installed trainer still has the broken code (a source probe for the two ``strategy.reduce`` calls; where no source
is shipped, the version window ``KNOWN_BROKEN``), so a Keras that fixed #20585 runs unpatched.
``NBWORKERS_KERAS3_FIX=0`` turns it off.
When an internal it needs is gone (``compat/internals.py``) nothing is patched and a multi-worker ``fit`` ends
in ``KerasFitUnderMultiWorkerError`` with the old advice (``distlib.fit`` or ``TF_USE_LEGACY_KERAS=1``).

Installed by ``install()`` (a post-import hook through ``wrapt``; no TensorFlow import until Keras's trainer
is imported by the cell), called by ``keras_compat.install_fit_guard``.
"""

from __future__ import annotations

import inspect
import os
import sys
from types import ModuleType
from typing import Any

from nbworkers.distlib import dirs
from nbworkers.distlib.cluster import TaskInfo
from nbworkers.distlib.compat import internals
from nbworkers.distlib.compat.import_hooks import when_imported
from nbworkers.protocol import env_settings

TRAINER_MODULE = internals.TRAINER  # Keras 3's TensorFlow trainer: named once, in the registry
BACKUP_MODULE = internals.BACKUP3
UPSTREAM_ISSUES = (
    "https://github.com/keras-team/keras/issues/20585",
    "https://github.com/tensorflow/tensorflow/issues/72388",
)
CHECKED_VERSIONS = {"keras": ("3.15.1",), "tensorflow": ("2.21.0",)}  # fixed and tested here
# Where the broken code is known to be: reported since TensorFlow 2.16 / 2.17 (tensorflow/tensorflow#72388, closed
# as a Keras issue), on keras-nightly 3.7.0.dev with tf-nightly 2.19 (keras-team/keras#20585, open), and here.
KNOWN_NEEDED_ON = {"keras": ("3.7.0.dev", "3.15.1", "3.16.0.dev"), "tensorflow": ("2.16", "2.17", "2.19.dev", "2.21.0")}
KNOWN_BROKEN = ((3, 0), (3, 16))  # inclusive (major, minor) window used when the trainer's source is missing
ENV_FIX = env_settings.KERAS3_FIX.name  # "0": leave Keras 3 alone (fit then fails with KerasFitUnderMultiWorkerError)

# The broken code, as the probe looks for it in the installed trainer's source.
_BROKEN_BUILD = "self.distribute_strategy.reduce("
_BROKEN_REDUCE = 'strategy.reduce("MEAN", v, axis=0)'

# what the patches did (status(), tests)
_state: dict[str, Any] = {"installed": False, "trainer": None, "backup": None}


def enabled(environ: dict[str, str] | None = None) -> bool:
    return env_settings.KERAS3_FIX.get(environ)


def _keras_version() -> tuple[int, ...]:
    try:
        from importlib.metadata import version

        text = version("keras")
    except Exception:
        return ()
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def still_broken(module: ModuleType) -> bool:
    """Whether this Keras trainer has the upstream bug (source probe; the version window without source)."""
    try:
        build_source = inspect.getsource(module.TensorFlowTrainer._maybe_symbolic_build)
        reduce_source = inspect.getsource(module.reduce_per_replica)
    except (OSError, TypeError, AttributeError):
        version = _keras_version()[:2]
        return bool(version) and KNOWN_BROKEN[0] <= version <= KNOWN_BROKEN[1]
    return _BROKEN_BUILD in build_source or _BROKEN_REDUCE in reduce_source


def status() -> str:
    """What happened to Keras's trainer: 'patched', 'not needed', 'off', 'internals missing', 'not imported'."""
    return _state["trainer"] or "not imported"


# ------------------------------------------------------------------------------------------------ the fixes
def _is_multi_worker(trainer_module: ModuleType, strategy) -> bool:
    return trainer_module._collective_all_reduce_multi_worker(strategy)


def _local_batch(strategy, batch):
    """One local replica's part of a (possibly distributed) batch: enough for Keras's symbolic build."""
    import tensorflow as tf

    def one(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    return tf.nest.map_structure(one, batch)


class StepsPerExecutionUnderMultiWorkerError(ValueError):
    """``steps_per_execution > 1`` in Keras 3's ``fit``/``evaluate`` under MultiWorkerMirroredStrategy."""


STEPS_PER_EXECUTION_MESSAGE = """\
Keras 3 compiled with steps_per_execution={steps} cannot train or evaluate under MultiWorkerMirroredStrategy on
several workers: it runs the steps in a tf.while_loop around a tf.cond, and the workers' all-reduce of the
gradients fails there ("You must feed a value for placeholder tensor ..."; upstream, with or without nbworkers).
Compile with steps_per_execution=1 (the default), or train with nbworkers.distlib.fit(model, dataset, epochs=...,
steps_per_epoch=...)."""


def _make_symbolic_build_wrapper(trainer_module: ModuleType):
    def symbolic_build(wrapped, instance, args, kwargs):
        bound = dict(zip(("iterator", "data_batch"), args), **kwargs)
        iterator = bound.get("iterator")
        strategy = getattr(instance, "_distribute_strategy", None)
        if iterator is None or strategy is None or not _is_multi_worker(trainer_module, strategy):
            return wrapped(*args, **kwargs)
        steps = getattr(instance, "steps_per_execution", 1)
        if isinstance(steps, int) and steps > 1:  # fail before any collective, with what to do
            raise StepsPerExecutionUnderMultiWorkerError(STEPS_PER_EXECUTION_MESSAGE.format(steps=steps))
        data_batch = None
        for _, _, it in iterator:  # as upstream: the first batch of the epoch iterator (reset by the caller)
            data_batch = _local_batch(strategy, next(it))
            break
        return wrapped(data_batch=data_batch)

    return symbolic_build


def global_means(strategy, values, other):
    """``values`` with every rank-0 leaf replaced by its MEAN over all replicas of all workers, and every other
    leaf by ``other(leaf)``. Scalars of one dtype on one device per worker go in ONE all-reduce (stacked)."""
    import tensorflow as tf

    flat = tf.nest.flatten(values)

    def local(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    out = list(flat)
    groups: dict = {}
    for index, value in enumerate(flat):
        first = local(value)
        if isinstance(first, (tf.Tensor, tf.Variable)) and first.shape.rank == 0:
            plain = not isinstance(value, tf.distribute.DistributedValues)
            groups.setdefault((first.dtype, plain), []).append(index)
        else:
            out[index] = other(value)
    for (_, plain), indices in groups.items():
        if plain and len(indices) > 1:
            reduced = strategy.reduce("MEAN", tf.stack([flat[i] for i in indices]), axis=None)
            for position, index in enumerate(indices):
                out[index] = reduced[position]
        else:
            for index in indices:
                out[index] = strategy.reduce("MEAN", flat[index], axis=None)
    return tf.nest.pack_sequence_as(values, out)


def _make_reduce_wrapper(trainer_module: ModuleType):
    def reduce_per_replica(wrapped, instance, args, kwargs):
        bound = dict(zip(("values", "strategy", "reduction"), args), **kwargs)
        strategy, reduction = bound.get("strategy"), bound.get("reduction")
        if reduction not in ("auto", "mean") or strategy is None or not _is_multi_worker(trainer_module, strategy):
            return wrapped(*args, **kwargs)
        # loss and metrics: MEAN over every replica of every worker; anything else as upstream
        return global_means(strategy, bound["values"], lambda value: wrapped(value, strategy, reduction))

    return reduce_per_replica


# ------------------------------------------------------------------------------------------------ BackupAndRestore
_BACKUP_PATHS = ("backup_dir", "_weights_path", "_training_metadata_path", "_prev_weights_path",
                 "_prev_training_metadata_path")


def _private_backup_paths(callback) -> dict[str, str] | None:
    """The non-chief's private copies of the callback's paths, or None on the chief / outside a cluster."""
    import tensorflow as tf

    strategy = tf.distribute.get_strategy() if callback.model is None else callback.model.distribute_strategy
    if not getattr(strategy.extended, "_in_multi_worker_mode", lambda: False)():
        return None
    if strategy.extended.should_checkpoint:  # the chief (the strategy's own view: any cluster resolver)
        return None
    private = getattr(callback, "_nbworkers_private_dir", None)
    if private is None:
        resolver = strategy.cluster_resolver
        info = TaskInfo(resolver.task_type or "worker", int(resolver.task_id or 0), 0, False, {})
        private = dirs.write_dir(callback.backup_dir, info)
        callback._nbworkers_private_dir = private
    requested = os.fspath(callback.backup_dir)
    return {name: getattr(callback, name).replace(requested, private.path, 1) for name in _BACKUP_PATHS}


def _redirected(method_name: str):
    """Run the callback's method with its write paths pointing at this worker's private directory."""

    def wrapper(wrapped, instance, args, kwargs):
        private = _private_backup_paths(instance)
        if private is None:
            return wrapped(*args, **kwargs)
        saved = {name: getattr(instance, name) for name in _BACKUP_PATHS}
        for name, value in private.items():
            setattr(instance, name, value)
        try:
            return wrapped(*args, **kwargs)
        finally:
            for name, value in saved.items():
                setattr(instance, name, value)
            if method_name == "on_train_end":
                instance._nbworkers_private_dir.cleanup()

    return wrapper


# ------------------------------------------------------------------------------------------------ install
def _log(message: str) -> None:
    sys.stderr.write(f"nbworkers: {message}\n")
    sys.stderr.flush()


def patch_trainer(module: ModuleType) -> str:
    """Apply the two trainer fixes to ``module`` (Keras's TensorFlow trainer) when needed; returns the status."""
    import wrapt

    if _state["trainer"] == "patched":
        return "patched"
    if not enabled():
        _state["trainer"] = "off"
        return "off"
    missing = internals.missing(group="keras3/mwms")
    if missing:
        internals.warn_once(missing, "Keras 3's model.fit under MultiWorkerMirroredStrategy stays unpatched (it will"
                            " fail): train with nbworkers.distlib.fit(model, dataset, epochs=..., steps_per_epoch=...)"
                            " or start the cell with %%worker --env TF_USE_LEGACY_KERAS=1 (tf_keras)")
        _state["trainer"] = "internals missing"
        return _state["trainer"]
    if not still_broken(module):
        _state["trainer"] = "not needed"
        return "not needed"
    wrapt.wrap_function_wrapper(module, "TensorFlowTrainer._maybe_symbolic_build", _make_symbolic_build_wrapper(module))
    wrapt.wrap_function_wrapper(module, "reduce_per_replica", _make_reduce_wrapper(module))
    _state["trainer"] = "patched"
    return "patched"


def patch_backup_and_restore(module: ModuleType) -> str:
    import wrapt

    if _state["backup"] == "patched" or not enabled():
        return _state["backup"] or "off"
    missing = internals.missing(group="keras3/mwms.backup")
    if missing:
        internals.warn_once(missing, "Keras 3's BackupAndRestore writes the same files on every worker")
        _state["backup"] = "internals missing"
        return _state["backup"]
    for name in ("_save_model", "on_train_end"):
        wrapt.wrap_function_wrapper(module, f"BackupAndRestore.{name}", _redirected(name))
    _state["backup"] = "patched"
    return "patched"


def install() -> None:
    """Patch Keras 3's trainer and BackupAndRestore once they are imported (idempotent; imports nothing now)."""
    if _state["installed"]:
        return
    _state["installed"] = True

    when_imported(TRAINER_MODULE, _safely(patch_trainer))
    when_imported(BACKUP_MODULE, _safely(patch_backup_and_restore))


def _safely(patch):
    def hook(module: ModuleType) -> None:
        try:
            patch(module)
        except Exception as error:  # never break the user's `import keras` (the marker tests look for)
            _log(f"post-import hook for {module.__name__} failed (ignored): {error!r}; Keras 3 under "
                 "MultiWorkerMirroredStrategy stays as upstream has it")

    return hook
