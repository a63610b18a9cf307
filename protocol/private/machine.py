"""Which machine (and which boot of it) a process runs on, for the names of files that the processes of several
machines may keep in one folder: a runtime directory on a shared home (``NBWORKERS_RUNTIME_DIR=~/...``) holds the
Unix sockets and the shared-memory fallback files of the user's kernels on every machine that mounts it.

A pid alone says nothing about a process of another machine: a sweep that removes the files of dead pids must look
only at names that carry this machine's key (``machine_key()``), and leave every other name alone.

``machine_key()``: 8 hex digits of a hash of this host's name and its boot id (``/proc/sys/kernel/random/boot_id``;
the name alone where that cannot be read). The host name tells apart containers that share a kernel (and its boot
id) but not their pids; the boot id tells apart machines that share a name, and this machine before and after a
reboot (a file of an earlier boot carries another key: it is never taken for a live one, and is left for the user
to remove). Imports only the standard library.
"""

from __future__ import annotations

import functools
import hashlib
import socket

BOOT_ID = "/proc/sys/kernel/random/boot_id"
KEY_PATTERN = "[0-9a-f]{8}"  # machine_key()'s form, for the names' regular expressions


def boot_id(path: str = BOOT_ID) -> str:
    """This boot's id, or "" where it cannot be read."""
    try:
        with open(path, encoding="ascii") as file:
            return file.read(100).strip()
    except (OSError, ValueError):
        return ""


def key_of(hostname: str, boot: str) -> str:
    """The key of the machine named ``hostname`` in its boot ``boot``."""
    return hashlib.sha256(f"{hostname}\0{boot}".encode()).hexdigest()[:8]


@functools.cache
def machine_key() -> str:
    """This machine's key (``key_of`` its host name and boot id), the same for every process of it."""
    return key_of(socket.gethostname(), boot_id())
