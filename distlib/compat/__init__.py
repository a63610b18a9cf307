"""The fence around TensorFlow's and Keras's private symbols: every import of ``tensorflow.python``,
``tensorflow.core``, ``keras.src``, ``tf_keras.src`` or ``tensorflow_estimator.python``, and every private
attribute nbworkers reads or sets on their objects (and JAX's ``jax._src``), lives here, registered in
``internals`` (one group per module, named after its path here: ``step_calls``, ``keras3/mwms``) with its upstream
issue and the versions it was checked on. The rest of the worker side calls small functions here.
tests/unit/test_layers.py holds the fence (an AST scan of every package file); tests/unit/test_compat_internals.py
checks the registry.

- ``internals``: the registry and the check before use; ``import_hooks``: post-import hooks and ``wrap_once``;
- ``eager_context``: has the eager context started (the one reader of ``Context._context_handle``), abort the
  collectives, the coordination service's key-value store;
- ``collectives_at_start``: collectives configured when the first op starts the context;
- ``mwms_patch``: the wrapper of MultiWorkerMirroredStrategy's multi-worker setup (``worker/mwms/strategy_setup.py``
  decides what happens around it: status, leader wait, device check);
- ``evaluator``: the evaluator task's local strategy and its Estimator evaluations;
- ``preemption_handler``: TensorFlow's PreemptionCheckpointHandler;
- ``step_calls``: every eager call of a distributed training step (a session's Stop pauses there);
- ``tf_keras_callbacks``: tf_keras's private callback protocol;
- ``keras3/``: Keras 3's (``mwms``: its fit under the strategy, ``fit_guard``: the guard around it, ``model``: what
  ``distlib.fit`` reads of a model, ``optimizer``: what a session's saved state reads of an optimizer, ``backup``:
  its BackupAndRestore files for a JAX run);
- ``jax/``: JAX's (``backends``: has a backend started, its key-value store, leaving without its shutdown;
  ``compile_cache``: one persistent-cache key for every process on CPU).
"""
