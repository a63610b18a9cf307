"""Every private TensorFlow / Keras symbol nbworkers touches, in one registry, with a check before use.

Each ``Internal`` names a module and an attribute path, the module of ``distlib/compat/`` that uses it (``group``:
its path there without ``.py``, ``eager_context`` or ``keras3/mwms``, or ``path.part`` for one of its patches
checked on its own), why,
the upstream issue it works around (when there is one) and the versions it was checked on. Two kinds:

- ``attribute``: ``getattr`` must resolve (a class, a function, a method, a module attribute);
- ``instance``: an attribute set on instances in the class's own code (``self._x = ...``), so the check looks
  for the name in the source of the class and its bases (it needs no instance: no cluster, no model).

``missing(group)`` says what is gone (imports the group's modules: call it right before patching, when they
are loaded anyway); ``warn_once`` prints one line per missing symbol per process.
tests/integration/test_compat_internals_installed.py checks every entry against the installed TensorFlow / Keras /
tf_keras. Importing this module imports
nothing heavy.
"""

from __future__ import annotations

import functools
import importlib
import sys
from dataclasses import dataclass

K20585 = "keras-team/keras#20585 (Keras 3 model.fit under MultiWorkerMirroredStrategy)"
TF72388 = "tensorflow/tensorflow#72388 (Invalid reduction dimension 0 under MultiWorkerMirroredStrategy)"
TF_221 = "tensorflow 2.21.0"
TF_215_221 = "tensorflow 2.15.1, 2.21.0"
KERAS3 = "keras 3.15.1 (tensorflow 2.21.0)"
TF_KERAS = "tf_keras 2.21.0"
ESTIMATOR = "tensorflow-estimator 2.15.0 (tensorflow 2.15.1, .venv-tf215)"
JAX = "jax 0.10.2 (keras 3.15.1)"

CARS = "tensorflow.python.distribute.collective_all_reduce_strategy"
CONTEXT = "tensorflow.python.eager.context"
MWU = "tensorflow.python.distribute.multi_worker_util"
TRAINER = "keras.src.backend.tensorflow.trainer"
BACKUP3 = "keras.src.callbacks.backup_and_restore"
PCH = "tensorflow.python.distribute.failure_handling.failure_handling"


@dataclass(frozen=True)
class Internal:
    module: str
    attribute: str  # dotted path inside the module: "Class.method", "function", "Class._instance_attr"
    group: str  # its distlib/compat module, "keras3/mwms" ("keras3/mwms.backup": a patch checked on its own)
    why: str
    checked: str  # versions this entry was checked on
    upstream: str = ""  # the upstream issue it works around, when there is one
    kind: str = "attribute"  # or "instance"

    @property
    def name(self) -> str:
        return f"{self.module}:{self.attribute}"


def _entries(group: str, module: str, checked: str, why: str, attributes: str, kind: str = "attribute",
             upstream: str = "") -> list[Internal]:
    return [Internal(module, a, group, why, checked, upstream, kind) for a in attributes.split()]


REGISTRY: tuple[Internal, ...] = tuple(
    # keras3/mwms: Keras 3's own fit / evaluate / predict under MultiWorkerMirroredStrategy
    _entries("keras3/mwms", TRAINER, KERAS3, "wrapped: build from one local replica's batch",
             "TensorFlowTrainer._maybe_symbolic_build", upstream=K20585)
    + _entries("keras3/mwms", TRAINER, KERAS3, "wrapped: reduce rank-0 step outputs with axis=None",
               "reduce_per_replica", upstream=TF72388)
    + _entries("keras3/mwms", TRAINER, KERAS3, "asks whether the strategy is multi-worker, as Keras does",
               "_collective_all_reduce_multi_worker", upstream=K20585)
    + _entries("keras3/mwms", "keras.src.trainers.trainer", KERAS3, "what the wrapped build calls",
               "Trainer._symbolic_build", upstream=K20585)
    + _entries("keras3/mwms", TRAINER, KERAS3, "the model's strategy (steps_per_execution check)",
               "TensorFlowTrainer._distribute_strategy", kind="instance", upstream=K20585)
    + _entries("keras3/mwms.backup", BACKUP3, KERAS3, "wrapped: non-chief workers write a private directory",
               "BackupAndRestore._save_model BackupAndRestore.on_train_end")
    + _entries("keras3/mwms.backup", BACKUP3, KERAS3, "redirected on non-chief workers",
               "BackupAndRestore._weights_path BackupAndRestore._training_metadata_path "
               "BackupAndRestore._prev_weights_path BackupAndRestore._prev_training_metadata_path", kind="instance")
    + _entries("keras3/mwms.backup", CARS, TF_221, "is the strategy multi-worker",
               "CollectiveAllReduceExtended._in_multi_worker_mode")
    # keras3/fit_guard: the fit guard (KerasFitUnderMultiWorkerError / ...ParameterServerError)
    + _entries("keras3/fit_guard", TRAINER, KERAS3, "wrapped: the upstream failure becomes a clear error",
               "TensorFlowTrainer.fit", upstream=K20585)
    + _entries("keras3/fit_guard", TRAINER, KERAS3, "the model's strategy", "TensorFlowTrainer._distribute_strategy",
               kind="instance")
    + _entries("keras3/fit_guard", CARS, TF_215_221, "isinstance check: MultiWorkerMirroredStrategy's base class",
               "CollectiveAllReduceStrategy")
    # keras3/model: what distlib.fit reads of a Keras 3 model and a distributed dataset
    + _entries("keras3/model", "keras.src.trainers.trainer", KERAS3,
               "creates metric/optimizer variables before tracing", "Trainer._symbolic_build")
    + _entries("keras3/model", TRAINER, KERAS3, "the model's strategy (built under strategy.scope())",
               "TensorFlowTrainer._distribute_strategy", kind="instance")
    + _entries("keras3/model", "tensorflow.python.distribute.values", TF_221, "one replica's element spec",
               "PerReplicaSpec._value_specs", kind="instance")
    + _entries("keras3/model", "tensorflow.python.distribute.input_lib", TF_221, "recognises a distributed dataset",
               "DistributedDataset._input_workers", kind="instance")
    # keras3/optimizer: a session's saved state builds a rebuilt optimizer's slots for the variables it had
    + _entries("keras3/optimizer", "keras.src.optimizers.base_optimizer", KERAS3,
               "the variables a built optimizer made its slots for", "BaseOptimizer._trainable_variables",
               kind="instance")
    + _entries("keras3/optimizer", "keras.src.backend.tensorflow.optimizer", KERAS3,
               "the strategy the optimizer was created under (its slots are built in it)",
               "TFOptimizer._distribution_strategy", kind="instance")
    # tf_keras_callbacks: ReportCallback and distlib.fit's save-on-SIGTERM speak tf_keras's private callback protocol
    + _entries("tf_keras_callbacks", "tf_keras.src.callbacks", TF_KERAS,
               "set on nbworkers' callbacks; read by tf_keras's CallbackList",
               "Callback._supports_tf_logs Callback._chief_worker_only", kind="instance")
    + _entries("tf_keras_callbacks", "tf_keras.src.callbacks", TF_KERAS,
               "implemented by ReportCallback; called by tf_keras",
               "Callback._implements_train_batch_hooks Callback._implements_test_batch_hooks "
               "Callback._implements_predict_batch_hooks")
    + _entries("tf_keras_callbacks", "tf_keras.src.callbacks", TF_KERAS,
               "the preemption save of tf_keras's BackupAndRestore",
               "BackupAndRestore._training_state", kind="instance")
    + _entries("tf_keras_callbacks", "tf_keras.src.distribute.worker_training_state", TF_KERAS, "writes the backup",
               "WorkerTrainingState.back_up")
    # mwms_patch: status, second-server skip, the cross-worker device check
    + _entries("mwms_patch", CARS, TF_215_221, "wrapped: status reports, leader wait, device check",
               "CollectiveAllReduceExtended._initialize_multi_worker")
    + _entries("mwms_patch", CARS, TF_215_221, "set or read around the wrapped setup",
               "CollectiveAllReduceExtended._std_server_started CollectiveAllReduceExtended._enable_check_health "
               "CollectiveAllReduceExtended._cluster_spec CollectiveAllReduceExtended._id_in_cluster "
               "CollectiveAllReduceExtended._num_workers CollectiveAllReduceExtended._num_devices_per_worker "
               "CollectiveAllReduceExtended._local_device_type", kind="instance")
    + _entries("mwms_patch", CONTEXT, TF_215_221, "the process's context; eager or graph mode",
               "context executing_eagerly")
    # collectives_at_start: collectives configured when the first op starts the context
    + _entries("collectives_at_start", CONTEXT, TF_215_221, "wrapped once on the context object; configuration calls",
               "context Context.ensure_initialized Context.configure_collective_ops "
               "Context.configure_coordination_service Context.enable_collective_ops Context.coordination_service "
               "Context.executing_eagerly Context.config")
    + _entries("collectives_at_start", CONTEXT, TF_215_221, "read to see whether someone configured the context",
               "Context._initialize_lock Context._collective_ops_server_def Context._server_def", kind="instance")
    + _entries("collectives_at_start", CARS, TF_215_221, "the same session config and coordination jobs MWMS makes",
               "CollectiveAllReduceExtended._update_config_proto coordination_config_pb2.CoordinatedJob")
    + _entries("collectives_at_start", MWU, TF_215_221, "the same cluster normalisation and leaders MWMS uses",
               "normalize_cluster_spec collective_leader coordination_leader")
    + _entries("collectives_at_start", "tensorflow.python.training.server_lib", TF_215_221,
               "the cluster as MWMS reads it",
               "ClusterSpec")
    + _entries("collectives_at_start", "tensorflow.core.protobuf.tensorflow_server_pb2", TF_215_221,
               "the server definition MWMS would build", "ServerDef")
    # eager_context: has the eager context (runtime, thread pools, CUDA) started, without creating one. The zygote
    # refuses to fork once it has (tensorflow/tensorflow#2448, #8220); the others never start a context by asking.
    + _entries("eager_context", CONTEXT, TF_215_221, "is there an eager context at all (without creating one)",
               "context_safe", upstream="tensorflow/tensorflow#2448 (fork after the runtime started hangs)")
    + _entries("eager_context", CONTEXT, TF_215_221, "has the eager context (runtime, thread pools, CUDA) started",
               "Context._context_handle", kind="instance", upstream="tensorflow/tensorflow#8220")
    # eager_context.store: the coordination service's key-value store (worker_facts exchanges small facts)
    + _entries("eager_context.store", CONTEXT, TF_215_221, "exchange small facts between workers",
               "context Context.set_config_key_value Context.get_config_key_value Context.wait_at_barrier "
               "Context.coordination_service")
    # eager_context.abort (interactive sessions): unblock a cell stuck in a collective
    + _entries("eager_context.abort", CONTEXT, TF_221, "aborts this process's collectives when a peer gave up",
               "context Context.abort_collective_ops")
    + _entries("eager_context.abort", "tensorflow.python.framework.errors", TF_221, "the abort's status code",
               "UNAVAILABLE")
    # evaluator: MWMS on the evaluator becomes a local strategy
    + _entries("evaluator", CARS, TF_215_221, "wrapped on the evaluator (outside the training cluster)",
               "CollectiveAllReduceExtended._initialize_strategy CollectiveAllReduceExtended._initialize_local")
    # evaluator.estimator: the evaluator reports each Estimator evaluation (TensorFlow 2.15 environments only)
    + _entries("evaluator.estimator", "tensorflow_estimator.python.estimator.estimator", ESTIMATOR,
               "wrapped on the evaluator: each evaluation's metrics reach the notebook", "Estimator.evaluate")
    # import_hooks: wrap_once asks a wrapt wrapper which function wraps (wrapt ships with TensorFlow)
    + _entries("import_hooks", "wrapt", "wrapt 2.5.2 (tensorflow 2.21.0), 1.14.2 (tensorflow 2.15.1)",
               "is this method already wrapped by this wrapper", "FunctionWrapper FunctionWrapper._self_wrapper")
    # step_calls (interactive sessions): each call of a traced distributed step is where a Stop may pause the workers
    + _entries("step_calls", "tensorflow.python.eager.polymorphic_function.polymorphic_function", TF_215_221,
               "wrapped: a call of a tf.function whose trace ran strategy.run/reduce is a training step",
               "Function Function.__call__",
               upstream="tensorflow/tensorflow#28786 (no way to interrupt a running tf.function)")
    + _entries("step_calls.estimator", "tensorflow_estimator.python.estimator.estimator", ESTIMATOR,
               "wrapped: one more hook, a step point before each training step", "Estimator.train")
    # jax/backends: has JAX initialised a backend (its runtime, threads, perhaps CUDA) in this process? A JAX zygote
    # refuses to fork once it has (JAX warns at os.fork after its backends started: jax-ml/jax#1805)
    + _entries("jax/backends", "jax._src.xla_bridge", JAX, "has a backend been initialised (without initialising one)",
               "backends_are_initialized", upstream="jax-ml/jax#1805 (fork after JAX's runtime started may deadlock)")
    # jax_backends.leave: a stopped or failed JAX worker leaves without JAX's atexit shutdown, which waits at a
    # barrier for every process (one still blocked in a collective with it never comes)
    + _entries("jax/backends.leave", "jax._src.api", JAX, "unregistered: the distributed shutdown's barrier",
               "clean_up")
    + _entries("jax/backends.leave", "jax._src.dispatch", JAX, "unregistered: waits for the runtime's tokens",
               "wait_for_tokens")
    # jax_backends.store: the coordination service's key-value store, where a stopped fit's workers agree on the step
    # they leave at (there is no public handle to it: jax-ml/jax#23001)
    + _entries("jax/backends.store", "jax._src.distributed", JAX, "the distributed client: its key-value store",
               "global_state global_state.client")
    # jax/compile_cache: one persistent-cache key for every process of a JAX run on CPU, as JAX has on GPU (on CPU
    # the key names the process's own device: process 1 never finds process 0's entries, and only process 0 writes)
    + _entries("jax/compile_cache", "jax._src.cache_key", JAX, "replaced on CPU: the key without the devices' ids",
               "_hash_serialized_compile_options _hash_accelerator_config _hash_devices",
               upstream="jax-ml/jax#18819 (the cache is written by process 0 alone)")
    # keras3/backup: where Keras 3's BackupAndRestore keeps its files, so that a JAX run's processes (one backup folder
    # each: distlib/keras_fit_jax.py) resume from the same epoch (no public accessor)
    + _entries("keras3/backup", BACKUP3, JAX, "read: the backup's weights and metadata files, current and previous",
               "BackupAndRestore._weights_path BackupAndRestore._training_metadata_path "
               "BackupAndRestore._prev_weights_path BackupAndRestore._prev_training_metadata_path", kind="instance")
    # preemption_handler: TensorFlow's PreemptionCheckpointHandler
    + _entries("preemption_handler", PCH, TF_221, "picks the step every worker saves at",
               "PreemptionCheckpointHandler PreemptionCheckpointHandler.save_checkpoint_if_preempted "
               "PreemptionCheckpointHandler._maybe_set_received_own_sigterm")
)

GROUPS = tuple(dict.fromkeys(entry.group for entry in REGISTRY))


def _resolve(module_name: str, path: str):
    target = importlib.import_module(module_name)
    for part in path.split("."):
        target = getattr(target, part)
    return target


@functools.lru_cache(maxsize=None)
def _module_text(module_name: str) -> str:
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return ""
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError:
        return ""


def _named_in_class_source(owner, name: str) -> bool:
    """``self.<name>`` in the code of the class or a base (a text search of their modules' files: fast)."""
    classes = owner.__mro__ if isinstance(owner, type) else (owner,)
    for klass in classes:
        text = _module_text(getattr(klass, "__module__", "") or "")
        if f"self.{name} " in text or f"self.{name}=" in text or f"self.{name}:" in text:
            return True
    return False


@functools.lru_cache(maxsize=None)
def problem(entry: Internal) -> str | None:
    """None when ``entry`` is present in the installed packages, else what is wrong."""
    try:
        if entry.kind == "instance":
            owner_path, _, name = entry.attribute.rpartition(".")
            owner = _resolve(entry.module, owner_path)
            if hasattr(owner, name) or _named_in_class_source(owner, name):
                return None
            return f"no attribute {name!r} is set in {owner_path}'s code"
        _resolve(entry.module, entry.attribute)
        return None
    except ImportError as error:
        return f"cannot import {entry.module} ({error})"
    except AttributeError as error:
        return f"{error}"


def entries(group: str | None = None) -> list[Internal]:
    return [e for e in REGISTRY if group is None or e.group == group]


def missing(group: str | None = None) -> list[tuple[Internal, str]]:
    """The entries of ``group`` (all when None) that the installed packages do not have, with the reason."""
    found = []
    for entry in entries(group):
        reason = problem(entry)
        if reason is not None:
            found.append((entry, reason))
    return found


_warned: set[str] = set()


def describe(missing_entries: list[tuple[Internal, str]]) -> str:
    lines = []
    for entry, reason in missing_entries:
        issue = f"; works around {entry.upstream}" if entry.upstream else ""
        lines.append(f"  {entry.name}: {reason} (checked on {entry.checked}{issue})")
    return "\n".join(lines)


def warn_once(missing_entries: list[tuple[Internal, str]], consequence: str) -> bool:
    """Print one warning naming what is missing and what that means (once per symbol per process)."""
    new = [(e, r) for e, r in missing_entries if e.name not in _warned]
    if not new:
        return False
    _warned.update(e.name for e, _ in new)
    sys.stderr.write(f"nbworkers: the installed TensorFlow/Keras moved internals nbworkers relies on; "
                     f"{consequence}:\n{describe(new)}\n")
    sys.stderr.flush()
    return True


def available(group: str, consequence: str) -> bool:
    """True when every symbol of ``group`` is there; else warn once and return False (callers skip their patch)."""
    gone = missing(group)
    if gone:
        warn_once(gone, consequence)
    return not gone
