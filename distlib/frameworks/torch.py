"""PyTorch's ``torch.distributed`` across processes (``%%worker --framework torch``): the worker side.

The kernel gives each worker ``torchrun``'s variables (``magics/frameworks/torch.py``: ``MASTER_ADDR``,
``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``...); the cell calls
``torch.distributed.init_process_group("gloo")`` itself, as under ``torchrun``. Nothing is initialised before the
cell (``before_user_code`` only checks that PyTorch is there).

Workers are never forked from the kernel (whose CUDA may be initialised: the bug users of Accelerate's
``notebook_launcher`` and Lightning's ``ddp_notebook`` hit). They fork from a zygote that imported PyTorch and ran
nothing (a fork after ``import torch`` is what a ``DataLoader``'s workers do every epoch); the guard refuses the fork
once CUDA is initialised there (``torch.cuda.is_initialized()``, public) or a thread pool started (the zygote counts
its OS threads), and the hosts then spawn fresh interpreters.

At the end: a worker whose cell finished destroys its process group (``destroy_process_group``: local, no barrier);
a stopped or failed one leaves it as it is, and the worker's exit closes its sockets, which ends a peer's collective
blocked on it ("Connection closed by peer", which the bootstrap reads as the Stop's own after a Stop).
"""

from __future__ import annotations

import sys

from nbworkers.distlib.frameworks import require
from nbworkers.distlib.worker import stop_signal

NAME = "torch"
IMPORTED = "PyTorch"  # what a forked worker's first line says its zygote imported

PRELOAD = (
    "torch",
    "torch.distributed",
    # every optimizer's constructor imports it (torch.optim.Optimizer: ~1.6 s of CPU, ~830 modules with sympy); it
    # starts no thread and no runtime
    "torch._dynamo",
    "zmq",
    "jupyter_client.session",
    "nbworkers.distlib.reporting",
)


def preload() -> list[str]:
    return list(PRELOAD)


def guard_broken() -> str:
    """Nothing private is read: the guard cannot break."""
    return ""


def fork_refusal() -> str | None:
    """A fork after CUDA initialised leaves the child unable to use it ("Cannot re-initialize CUDA in forked
    subprocess")."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialised in the zygote (torch.cuda.is_initialized())"
    return None


def before_user_code() -> None:
    """PyTorch is installed for this interpreter (else a clear error); the cell joins its group itself."""
    require("torch", "torch.distributed")


def leaving(exit_code: int) -> None:
    """A finished worker destroys its process group; a stopped or failed one leaves it to the process's exit."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        if exit_code == 0 and not stop_signal.requested():
            try:
                dist.destroy_process_group()
            except Exception as error:  # (the worker's exit closes its sockets anyway)
                print(f"nbworkers: destroy_process_group: {error!r}", file=sys.stderr, flush=True)
