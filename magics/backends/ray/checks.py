"""What a ``--backend ray`` launch checks before anything starts: Ray importable, its address answering.

Each failure is a ``RayBackendError`` (a ``LaunchError``: nothing was started) that says what to do.
"""

from __future__ import annotations

import socket

from nbworkers.magics.backends.ray.address import parse_address
from nbworkers.magics.backends.ray.quick_import import without_iri_grammar
from nbworkers.magics.backends.ray.ray_settings import ray_settings
from nbworkers.magics.errors import LaunchError

INSTALL_HINT = 'pip install "nbworkers[ray]"'


class RayBackendError(LaunchError):
    """The Ray backend cannot start the workers as asked; nothing was left running."""



def import_ray():
    """Ray, or a clear error saying how to get it (imported without jsonschema's IRI grammar: quick_import.py)."""
    try:
        with without_iri_grammar():
            import ray
    except ImportError as error:
        raise RayBackendError(
            f"--backend ray needs Ray, which is not installed here ({error}). Install it with `{INSTALL_HINT}`"
            " (in the kernel's environment and on every Ray node), then restart the kernel."
        ) from None
    return ray


def split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of a ``HOST:PORT`` or ``ray://HOST:PORT`` address; None for ``auto``/``local``/empty."""
    parsed = parse_address(address)
    if parsed is None:
        return None
    host, port = parsed
    if port is None or not host:
        raise RayBackendError(
            f"--address {address}: expected HOST:PORT of the Ray head node (as `ray start --head` prints it),"
            " ray://HOST:PORT, or auto."
        )
    return host, port


def check_address(address: str, timeout: float | None = None) -> None:
    """Fail fast, before anything starts, when nothing answers at the Ray address."""
    where = split_address(address)
    if where is None:
        return
    timeout = ray_settings().connect_timeout if timeout is None else timeout
    try:
        with socket.create_connection(where, timeout=timeout):
            pass
    except OSError as error:
        raise RayBackendError(
            f"--address {address}: nothing answers there ({error}). Is the Ray head node up (`ray status"
            f" --address {where[0]}:{where[1]}`) and its port open to this machine? Nothing was started."
        ) from None


def check_launch(address: str) -> None:
    """Everything a ``--backend ray`` launch needs that can be checked before the cluster exists."""
    import_ray()
    check_address(address)


