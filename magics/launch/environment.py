"""The environment a worker process starts with."""

from __future__ import annotations

from collections.abc import Mapping

from nbworkers.magics.frameworks import registry as frameworks

# Set by the kernel for itself; wrong or harmful in a plain worker interpreter.
KERNEL_ONLY_PREFIXES = ("JPY_", "PYDEVD_", "IPY_")
KERNEL_ONLY_NAMES = ("CLICOLOR_FORCE", "FORCE_COLOR")  # and every framework's variables (TF_CONFIG)
# TensorFlow's C++ start-up chatter (oneDNN, cuda/cuDNN factory registration, absl, gRPC server lines) hidden
# unless the user asked for it: "2" keeps C++ errors. The kernel's own setting or --env wins.
DEFAULT_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}


def worker_env(base: Mapping[str, str], extra: Mapping[str, str], variables: Mapping[str, str],
               cuda_visible_devices: str, wire_env: Mapping[str, str],
               shared: Mapping[str, str] | None = None) -> dict[str, str]:
    """``variables``: the framework's for this worker (``magics/frameworks``: ``{"TF_CONFIG": ...}``); ``shared``:
    the framework's for every worker of the run, read at import (``registry.shared``; None: the default
    framework's), over the kernel's values but under the user's ``--env``."""
    per_worker = frameworks.variables() | set(variables)  # never the kernel's own TF_CONFIG
    env = {
        k: v for k, v in base.items()
        if not k.startswith(KERNEL_ONLY_PREFIXES) and k not in KERNEL_ONLY_NAMES and k not in per_worker
    }
    if env.get("MPLBACKEND", "").startswith("module://"):  # the kernel's inline backend does not exist there
        del env["MPLBACKEND"]
    env["PYTHONUNBUFFERED"] = "1"
    for name, value in DEFAULT_ENV.items():
        env.setdefault(name, value)
    env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    env.update(frameworks.shared() if shared is None else shared)
    env.update(extra)  # the user's --env wins over inherited values ...
    env.update(variables)  # ... but not over what makes the cluster work
    env.update({k: v for k, v in wire_env.items() if v})
    return env


def cpp_log_level(base: Mapping[str, str], extra: Mapping[str, str]) -> str:
    """The TF_CPP_MIN_LOG_LEVEL the workers get: --env, else the kernel's, else the default."""
    return extra.get("TF_CPP_MIN_LOG_LEVEL") or base.get("TF_CPP_MIN_LOG_LEVEL") or DEFAULT_ENV["TF_CPP_MIN_LOG_LEVEL"]
