"""Keras 3 vs tf_keras under MultiWorkerMirroredStrategy.

Keras 3's ``model.fit`` fails under MultiWorkerMirroredStrategy upstream with ``ValueError: Attempt to
convert a value (PerReplica...)`` (keras-team/keras#20585). ``install_fit_guard()`` installs the fix
(``keras3/mwms``: Keras 3's own ``fit``/``evaluate``/``predict`` then work) and wraps Keras 3's ``fit`` so
that, where the fix could not apply (a Keras whose internals moved, ``NBWORKERS_KERAS3_FIX=0``), the upstream
failure becomes ``KerasFitUnderMultiWorkerError``, whose message names the two ways that work:
``nbworkers.distlib.fit`` (a distributed loop for the same compiled Keras 3 model), or running the tutorial's
code unchanged on tf_keras (Keras 2) with ``TF_USE_LEGACY_KERAS=1``. The same guard turns Keras 3's ``fit``
under ParameterServerStrategy (which never hands the dataset to the ClusterCoordinator) into
``KerasFitUnderParameterServerError``, naming tf_keras or a coordinator loop. The guard also spares the user
Keras's warning about a ``shuffle=True`` they never passed (``quiet_dataset_shuffle``).
"""

from __future__ import annotations

import importlib.util
import os
import sys

from nbworkers.distlib.compat import internals
from nbworkers.distlib.compat.import_hooks import when_imported, wrap_once
from nbworkers.distlib.compat.keras3 import mwms
from nbworkers.protocol import tf_messages

ENV_LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
UPSTREAM_ISSUE = "https://github.com/keras-team/keras/issues/20585"

FIT_UNDER_MWMS_MESSAGE = f"""\
Keras 3's model.fit does not work under MultiWorkerMirroredStrategy (upstream bug: {UPSTREAM_ISSUE}), and
nbworkers' fix for it could not apply here (NBWORKERS_KERAS3_FIX=0, or this Keras moved the internals the fix
needs: see the warning above). Two ways that work with nbworkers:
  1. Keep Keras 3 and train with the distributed fit from nbworkers (same compiled model, loss, optimizer,
     metrics and callbacks):
         from nbworkers import distlib
         distlib.fit(model, dataset, epochs=..., steps_per_epoch=...)
  2. Run the tutorial's code unchanged on tf_keras (Keras 2): start the cell with
         %%worker --env TF_USE_LEGACY_KERAS=1
     (or call nbworkers.distlib.use_tf_keras() before importing tensorflow) and build the model with tf.keras."""

_LEGACY_VALUES = ("1", "true", "True")
_installed = False


class KerasFitUnderMultiWorkerError(RuntimeError):
    """Keras 3 ``model.fit`` was called under MultiWorkerMirroredStrategy (see FIT_UNDER_MWMS_MESSAGE)."""


KERAS3_FIT_UNDER_PSS_MESSAGE = """\
Keras 3's model.fit does not support ParameterServerStrategy (it never hands the dataset to the
ClusterCoordinator). Two ways that work with nbworkers --ps:
  1. Run TensorFlow's parameter-server tutorial unchanged on tf_keras (Keras 2), whose model.fit drives the
     workers: start the cell with  %%worker --ps N --env TF_USE_LEGACY_KERAS=1  and build the model with tf.keras.
  2. Keep Keras 3 and train with a custom loop: tf.distribute.coordinator.ClusterCoordinator(strategy),
     coordinator.create_per_worker_dataset(dataset_fn), coordinator.schedule(train_step, ...), coordinator.join()."""


class KerasFitUnderParameterServerError(RuntimeError):
    """Keras 3 ``model.fit`` was called under ParameterServerStrategy (see KERAS3_FIT_UNDER_PSS_MESSAGE)."""


class TfKerasTooLateError(RuntimeError):
    """``use_tf_keras()`` was called after TensorFlow had already bound ``tf.keras`` to Keras 3."""


def use_tf_keras() -> None:
    """Make ``tf.keras`` tf_keras (Keras 2), whose ``model.fit`` works under MultiWorkerMirroredStrategy.

    Must run before TensorFlow is imported (it reads TF_USE_LEGACY_KERAS once). Under %%worker the same
    is ``%%worker --env TF_USE_LEGACY_KERAS=1``.
    """
    if os.environ.get(ENV_LEGACY_KERAS) in _LEGACY_VALUES:
        return
    if "tensorflow" in sys.modules:
        raise TfKerasTooLateError(
            "use_tf_keras() must be called before `import tensorflow` (TensorFlow decides what tf.keras is when"
            " it is imported). Move it to the top of the cell, or start the cell with"
            " `%%worker --env TF_USE_LEGACY_KERAS=1`."
        )
    if importlib.util.find_spec("tf_keras") is None:  # found, not imported (importing it imports TF)
        raise ImportError("use_tf_keras() needs the tf_keras package: pip install tf-keras")
    os.environ[ENV_LEGACY_KERAS] = "1"


def using_tf_keras() -> bool:
    return os.environ.get(ENV_LEGACY_KERAS) in _LEGACY_VALUES


def _is_multi_worker(strategy) -> bool:
    from tensorflow.python.distribute.collective_all_reduce_strategy import CollectiveAllReduceStrategy

    return isinstance(strategy, CollectiveAllReduceStrategy)


def _is_parameter_server(strategy) -> bool:
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)


def _looks_like_the_upstream_failure(error: BaseException) -> bool:
    return tf_messages.mentions(str(error), tf_messages.KERAS3_FIT_UNDER_MWMS)


def _guard_trainer_module(module) -> None:
    if not internals.available("keras3/fit_guard",
                               "Keras 3's fit failures under the strategies keep upstream's message"):
        return
    if getattr(module, "TensorFlowTrainer", None) is not None:
        wrap_once(module.TensorFlowTrainer, "fit", _guarded_fit)


SHUFFLE_POSITION = 8  # fit(x, y, batch_size, epochs, verbose, callbacks, validation_split, validation_data, shuffle)


def quiet_dataset_shuffle(args: tuple, kwargs: dict, is_dataset) -> dict:
    """``fit``'s keyword arguments with ``shuffle=False`` when the user passed no ``shuffle`` and ``x`` is a dataset
    (``is_dataset(x)``). Keras 3 defaults to ``shuffle=True`` and then warns, for every ``tf.data.Dataset``, that
    "`shuffle=True` was passed, but will be ignored" (keras/src/trainers/data_adapters/__init__.py): a warning about
    an argument the user never gave. Keras ignores ``shuffle`` for a dataset, so False changes nothing else; a user
    who does pass ``shuffle=True`` still gets Keras's warning."""
    if "shuffle" in kwargs or len(args) > SHUFFLE_POSITION:
        return kwargs
    x = args[0] if args else kwargs.get("x")
    if x is None or not is_dataset(x):
        return kwargs
    return {**kwargs, "shuffle": False}


def _is_dataset(x) -> bool:
    import tensorflow as tf

    return isinstance(x, (tf.data.Dataset, tf.distribute.DistributedDataset))


def _guarded_fit(wrapped, instance, args, kwargs):
    """wrapt wrapper of Keras 3's ``TensorFlowTrainer.fit``: the upstream failures become clear errors; no
    warning about a ``shuffle`` the user never passed (``quiet_dataset_shuffle``)."""
    kwargs = quiet_dataset_shuffle(args, kwargs, _is_dataset)
    try:
        return wrapped(*args, **kwargs)
    except (ValueError, TypeError) as error:
        strategy = getattr(instance, "_distribute_strategy", None)
        if strategy is None:
            import tensorflow as tf

            strategy = tf.distribute.get_strategy()
        if _looks_like_the_upstream_failure(error) and _is_multi_worker(strategy):
            raise KerasFitUnderMultiWorkerError(FIT_UNDER_MWMS_MESSAGE) from None
        if tf_messages.mentions(str(error), tf_messages.KERAS3_FIT_UNDER_PSS) and _is_parameter_server(strategy):
            raise KerasFitUnderParameterServerError(KERAS3_FIT_UNDER_PSS_MESSAGE) from None
        raise


def install_fit_guard() -> None:
    """Fix and guard Keras 3's fit now if Keras 3 is loaded, else as soon as it is (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True

    mwms.install()  # the fix: Keras 3's own fit/evaluate/predict under the strategy
    when_imported(mwms.TRAINER_MODULE, mwms._safely(_guard_trainer_module))  # now if imported
