"""Keras 3 on JAX across processes (``%%worker --framework jax``): Keras' own environment contract, composed here.

Each worker gets ``KERAS_DISTRIBUTION_JOB_ADDRESSES`` (every worker's address, worker 0's first: the coordinator
``jax.distributed`` starts there, on the port the backend chose for it as for TensorFlow),
``KERAS_DISTRIBUTION_NUM_PROCESSES`` and ``KERAS_DISTRIBUTION_PROCESS_ID``; every worker of the run shares
``KERAS_BACKEND=jax`` (the user's ``--env KERAS_BACKEND=...`` wins) and ``JAX_NUM_CPU_DEVICES`` (``--cpu-devices
N``, default 1), both read at import, so they select the zygote (one that imported JAX, Keras on JAX, and
TensorFlow when installed). What the worker does with them before the cell's code: ``distlib/frameworks/jax.py``.
GPUs per worker: as for TensorFlow (``CUDA_VISIBLE_DEVICES``). Registered as ``jax`` in the entry-point group
``nbworkers.frameworks``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbworkers.magics.plugins import Flag
from nbworkers.magics.shapes import PlannedTask

ENV_ADDRESSES = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
ENV_PROCESSES = "KERAS_DISTRIBUTION_NUM_PROCESSES"
ENV_PROCESS_ID = "KERAS_DISTRIBUTION_PROCESS_ID"
ENV_BACKEND = "KERAS_BACKEND"
ENV_CPU_DEVICES = "JAX_NUM_CPU_DEVICES"


def _cpu_devices(text: str) -> int:
    count = int(text)
    if count < 1:
        raise ValueError(text)
    return count


@dataclass(frozen=True)
class Jax:
    """The ``Framework`` (``frameworks/__init__.py``) of Keras 3's distribution on JAX (and raw JAX)."""

    name: str = "jax"
    summary: str = "Keras 3 on JAX across processes (keras.distribution; pip install nbworkers[jax])"
    flags: Sequence[Flag] = (
        Flag("--cpu-devices", {"type": _cpu_devices, "default": 1, "metavar": "N",
                               "help": "CPU devices each JAX worker has (JAX_NUM_CPU_DEVICES; default 1)"}),
    )
    roles: frozenset[str] = frozenset({"worker"})
    variables: frozenset[str] = frozenset({ENV_ADDRESSES, ENV_PROCESSES, ENV_PROCESS_ID})
    shown: str = ENV_ADDRESSES
    requires: Sequence[str] = ("jax", "keras")
    # gloo's line when a worker's CPU collectives are up (every healthy run prints it, once per worker)
    chatter: Sequence[str] = (r"\[Gloo\] Rank \d+ is connected to \d+ peer ranks\. ",)

    def environment(self, tasks: Sequence[PlannedTask], hosts: Sequence[str], ports: Sequence[int],
                    index: int) -> dict[str, str]:
        addresses = ",".join(f"{host}:{port}" for host, port in zip(hosts, ports))
        return {ENV_ADDRESSES: addresses, ENV_PROCESSES: str(len(tasks)), ENV_PROCESS_ID: str(index)}

    def shared(self, options: Mapping[str, Any]) -> dict[str, str]:
        return {ENV_BACKEND: "jax", ENV_CPU_DEVICES: str(options.get("cpu_devices") or 1)}


JAX = Jax()
