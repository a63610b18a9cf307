"""Keras 3 on JAX across processes (``%%worker --framework jax``): the worker side.

The kernel gives each worker Keras' own contract (``magics/frameworks/jax.py``): ``KERAS_BACKEND=jax`` (unless the
user chose another), ``KERAS_DISTRIBUTION_JOB_ADDRESSES`` (worker 0's address, the coordinator, first),
``KERAS_DISTRIBUTION_NUM_PROCESSES``, ``KERAS_DISTRIBUTION_PROCESS_ID`` and ``JAX_NUM_CPU_DEVICES``. Before the
cell's code, ``before_user_code`` calls ``keras.distribution.initialize()`` (``jax.distributed.initialize`` with
the coordinator on worker 0, and a seed every process agrees on: ``jax.distributed.initialize`` alone leaves each
process's initial weights its own, and ``device_put`` refuses them) and sets a ``DataParallel`` distribution over
every process's devices: a Keras ``model.fit`` written for one process trains data-parallel across all of them, and
raw JAX sees ``jax.process_count()`` processes. With another Keras backend, JAX alone is initialised.

Each worker keeps the programs it compiles in JAX's persistent cache, a private folder of its machine, with one key
for every process on CPU (``compat/jax/compile_cache.py``): a cell run again loads them instead of compiling.

A JAX zygote imports JAX and Keras on JAX, and TensorFlow when it is installed (``preload``), and lists no device: a
fork after JAX initialised a backend may deadlock the child (``compat/jax/backends.py``), as one after TensorFlow's
runtime started does (``compat/eager_context.py``); the guard checks both.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from nbworkers.distlib.compat import eager_context
from nbworkers.distlib.compat.jax import backends as jax_backends
from nbworkers.distlib.compat.jax import compile_cache as jax_compile_cache
from nbworkers.distlib.frameworks import jax_stop, require
from nbworkers.distlib.worker import stop_signal
from nbworkers.distlib.worker.status import send_status
from nbworkers.protocol.statuses import WorkerStatus

NAME = "jax"
IMPORTED = "JAX and Keras on JAX"  # what a forked worker's first line says its zygote imported
ENV_ADDRESSES = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
ENV_PROCESSES = "KERAS_DISTRIBUTION_NUM_PROCESSES"
ENV_PROCESS_ID = "KERAS_DISTRIBUTION_PROCESS_ID"

PRELOAD = (
    "jax",
    "keras",  # on JAX: KERAS_BACKEND=jax is in the zygote's environment (a variable read at import: its key)
    "zmq",
    "jupyter_client.session",
    "nbworkers.distlib.reporting",
)


def preload() -> list[str]:
    """``PRELOAD``, and TensorFlow when it is installed: ``keras.distribution.initialize()`` imports it whenever it
    can (Keras' ``rng_utils.set_random_seed`` seeds ``tf.random`` too, for ``tf.data``), so without it in the zygote
    every JAX worker paid TensorFlow's import (seconds) before the cell, cell using ``tf.data`` or not. Importing
    it starts no runtime (the TensorFlow zygote does the same); the guard checks that it has not started."""
    names = list(PRELOAD)
    if importlib.util.find_spec("tensorflow") is not None:
        names.append("tensorflow")
    return names


def guard_broken() -> str:
    gone = jax_backends.missing() if "jax" in sys.modules else []
    gone += eager_context.missing() if "tensorflow" in sys.modules else []
    return "the fork guard cannot check this JAX (or its TensorFlow): " + ", ".join(gone) if gone else ""


def fork_refusal() -> str | None:
    if jax_backends.started():
        return "JAX has initialised a backend in the zygote (its runtime started)"
    if eager_context.started():
        return "TensorFlow's runtime has started in the zygote (its eager context is initialised)"
    return None


def before_user_code() -> None:
    """Join the group: Keras' distribution (a ``DataParallel`` over every process's devices) on JAX, else JAX's."""
    jax, keras = require("jax", "jax", "keras")

    # JAX's preemption service catches SIGTERM in C++ and carries on: a stop's SIGTERM must end a worker blocked in
    # a collective (nbworkers' hosts are the ones that signal; distlib's checkpoints are Keras' own)
    jax.config.update("jax_enable_preemption_service", False)
    # the widget's card says so while the processes connect (the bootstrap says "running" once they have)
    send_status(WorkerStatus.WAITING, f"joining {os.environ.get(ENV_PROCESSES, '?')} JAX processes")
    if keras.backend.backend() == "jax":
        keras.distribution.initialize()  # reads the KERAS_DISTRIBUTION_* variables; agrees on a seed
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
        jax_stop.install()  # a Stop ends every worker's fit after the same step (distlib/frameworks/jax_stop.py)
    else:
        addresses = os.environ.get(ENV_ADDRESSES, "")
        jax.distributed.initialize(coordinator_address=addresses.split(",")[0],
                                   num_processes=int(os.environ.get(ENV_PROCESSES, "1")),
                                   process_id=int(os.environ.get(ENV_PROCESS_ID, "0")))
        print(f"nbworkers: Keras runs on {keras.backend.backend()}, not JAX: JAX's processes are joined "
              "(jax.process_count()), without a Keras distribution", file=sys.stderr, flush=True)
    jax_compile_cache.enable()  # a cell run again loads its programs instead of compiling them (before any compile)
    stop_signal.reassert_sigterm()


def leaving(exit_code: int) -> None:
    """A worker that was stopped or failed leaves without JAX's distributed shutdown: its barrier would wait for a
    peer still blocked in a collective with this process, which is freed only when this process's sockets close.
    A worker that finished waits at that barrier now, for as long as its peers take to finish (JAX's own limit),
    not within the ``atexit`` functions' 10 s: worker 0 runs the coordination service, and a peer whose coordinator
    left is aborted by JAX (seen: worker 1 still working 25 s after worker 0's end crashed, and the group restarted)."""
    if exit_code != 0 or stop_signal.requested():
        jax_backends.leave_without_shutdown()
    elif "jax" in sys.modules:
        import jax

        jax.distributed.shutdown()  # (nothing when the processes were never joined)
