"""TensorFlow's worker side: what its zygote imports, its fork guard, and the bootstrap before the cell's code (the
import hooks of ``worker/startup.py``: early collectives, MultiWorkerMirroredStrategy's setup, Keras 3's fit fixes).
Its workers join their group through ``TF_CONFIG`` (composed in the kernel: ``magics/frameworks/tensorflow.py``)."""

from __future__ import annotations

import os
import sys

from nbworkers.distlib.compat import eager_context

NAME = "tf"
IMPORTED = "TensorFlow"  # what a forked worker's first line says its zygote imported

# What a zygote imports ahead of its runs: TensorFlow (which binds tf.keras to Keras 3 or tf_keras from the
# environment, the same one the run will have), the relay's and distlib's worker-side modules. None of them
# starts TensorFlow's eager context, a server, or opens a port.
PRELOAD = (
    "tensorflow",
    "zmq",
    "jupyter_client.session",
    "nbworkers.distlib.worker.startup",
    "nbworkers.distlib.worker.mwms.strategy_setup",
    "nbworkers.distlib.worker.mwms.collective_startup",
    "nbworkers.distlib.compat.keras3.fit_guard",
    "nbworkers.distlib.reporting",
)


def preload() -> list[str]:
    """``PRELOAD`` and the Keras that ``tf.keras`` is (``tf_keras`` with ``TF_USE_LEGACY_KERAS``)."""
    legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes")
    return [*PRELOAD, "tf_keras" if legacy else "keras"]


def guard_broken() -> str:
    """Why the fork guard cannot be trusted ("" when it can): the private symbols it reads are gone (checked once,
    after the imports)."""
    gone = eager_context.missing() if "tensorflow" in sys.modules else []
    return "the fork guard cannot check this TensorFlow: " + ", ".join(gone) if gone else ""


def fork_refusal() -> str | None:
    """Forking after TensorFlow's runtime started hangs the child (tensorflow/tensorflow#2448, #8220)."""
    if eager_context.started():
        return "TensorFlow's runtime has started in the zygote (its eager context is initialised)"
    return None


def leaving(exit_code: int) -> None:
    """Nothing: TensorFlow's atexit functions run as they are (``bootstrap.run_atexit``)."""


def before_user_code() -> None:
    """The import hooks (cheap: no TensorFlow import; idempotent)."""
    from nbworkers.distlib.worker import startup

    startup.before_user_code()
