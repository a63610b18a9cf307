"""JAX's persistent compilation cache for a JAX run's workers, with one key for every process on CPU.

A JAX worker compiles each program it runs once per process: for a small Keras model on two CPU processes, 19
programs (the initialisers' random draws and their placement, the train step) in 2.2-2.4 s of CPU each, after the
imports a zygote already did (measured 2026-11-29, jax 0.10.2, keras 3.15.1): most of what a warm run waits for. JAX
keeps compiled programs on disk when ``jax_compilation_cache_dir`` is set; ``enable()`` sets it (unless the user did)
to a private folder of this machine, ``runtime_dir("nbworkers-jax-cache")/<machine_key>`` (0700, its parents
checked: the entries are executables this process loads), caps it at ``MAX_BYTES`` (JAX evicts the least recently
used; it needs ``filelock``, which ``nbworkers[jax]`` brings: without it the folder is not capped) and caches every
program, however quick to compile (JAX's default keeps only those over 1 s).

Only process 0 writes entries (jax-ml/jax#18819), and on CPU JAX keys an entry on the fingerprint of the topology of
the devices the program runs on and on its device assignment: a process's own device, so process 1 never found the
entries process 0 wrote and compiled all 19 again (measured: 0 compiles in process 0, 19 in process 1, with the cache
filled). On GPU JAX strips the device assignment from the key "to use cache key as invariant between processes"
(``jax/_src/cache_key.py``); ``invariant_keys()`` does the same on CPU, and hashes the devices' kinds and count (JAX's
own fall-back for backends without a topology) instead of the topology's fingerprint. Then neither process compiled
anything, and the model trained to the same weights as without the cache (a fixed seed, checksums equal). Programs
of one process with two CPU devices and of two processes with one each now share keys: checked both ways (either
filled the cache, the other loaded 6-12 of its programs from it and trained to the weights it had without). A process
loading an executable another process compiled is JAX's own path (``jax_share_binary_between_hosts``, and the
GPU cache). Only where every device is a CPU: GPU and TPU keys are JAX's.

The entries are kept per machine (and boot): a runtime directory on a shared home (``NBWORKERS_RUNTIME_DIR``) must
not hand one machine's CPU code to another with other instruction sets (the CPU key names no CPU features).
``NBWORKERS_JAX_COMPILE_CACHE=0`` leaves JAX's cache as the user set it. Group ``jax/compile_cache`` in
``internals``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from nbworkers.distlib.compat import internals
from nbworkers.protocol import env_settings
from nbworkers.protocol.private import dirs
from nbworkers.protocol.private.machine import machine_key

CACHE_KEY = "jax._src.cache_key"
FOLDER = "nbworkers-jax-cache"
MAX_BYTES = 512 * 1024 * 1024  # JAX's LRU eviction keeps the folder under this
USER_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"


def folder() -> Path:
    """This machine's private cache folder (made 0700, or checked)."""
    return dirs.private_dir(dirs.runtime_dir(FOLDER) / machine_key())


def enable() -> str | None:
    """Turn JAX's persistent cache on for this worker, unless switched off or already set by the user; return the
    folder in use (the user's or ours), None when there is none. Before the first compile (JAX reads the settings
    at its first cache use)."""
    import jax

    chosen = getattr(jax.config, "jax_compilation_cache_dir", None) or os.environ.get(USER_DIR_ENV)
    if not env_settings.JAX_COMPILE_CACHE.get():
        return chosen or None
    if not chosen:
        try:
            chosen = str(folder())
        except (dirs.UnsafeDirectory, OSError) as error:  # the worker runs on, compiling every program again
            print(f"nbworkers: JAX's compiled programs are not kept: {error}", file=sys.stderr, flush=True)
            return None
        jax.config.update("jax_compilation_cache_dir", chosen)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        if importlib.util.find_spec("filelock") is not None:  # JAX's eviction locks the folder with it
            jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    if all(device.platform == "cpu" for device in jax.devices()):
        invariant_keys()
    return chosen


_installed = False


def invariant_keys() -> bool:
    """Key CPU programs as JAX keys GPU ones (see above); False, with one warning, where JAX moved these."""
    global _installed
    if _installed:
        return True
    if not internals.available("jax/compile_cache", "a JAX worker other than 0 compiles again the programs that "
                                                    "process 0 cached"):
        return False
    cache_key: Any = importlib.import_module(CACHE_KEY)
    hash_options = cache_key._hash_serialized_compile_options
    hash_devices = cache_key._hash_devices

    def options_without_devices(hash_obj: Any, compile_options: Any, strip_device_assignment: bool = False) -> Any:
        return hash_options(hash_obj, compile_options, strip_device_assignment=True)

    def device_kinds(hash_obj: Any, accelerators: Any) -> None:
        hash_devices(hash_obj, accelerators)

    cache_key._hash_serialized_compile_options = options_without_devices
    cache_key._hash_accelerator_config = device_kinds
    _installed = True
    return True
