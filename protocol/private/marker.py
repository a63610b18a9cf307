"""A forked worker's run marker in its own ``/proc/PID/environ``.

Ownership (``ownership.py``) reads a process's environment from ``/proc/PID/environ``: the environment block
the process started with. A worker forked from a zygote started as the zygote, so that block is the zygote's,
and setting ``os.environ`` after the fork does not change it. The zygote therefore starts with
``NBWORKERS_RUN_ID`` set to ``RUN_ID_PLACEHOLDER`` (as long as a real run id, matching no run), and each forked
child writes its run's id over the placeholder, in place, in its own copy of that block (the fork copied it;
the zygote's is untouched). From then on the child carries its run's marker exactly as a spawned worker does,
and the zygote carries none.

The block's address is in ``/proc/self/stat`` (fields 50 and 51, ``env_start`` and ``env_end``, Linux 3.5+).
Imports only the standard library and ``env_settings`` (runs in the forked child).
"""

from __future__ import annotations

import ctypes

from nbworkers.protocol import env_settings

RUN_ID_ENV = env_settings.RUN_ID.name
RUN_ID_PLACEHOLDER = "0" * 24  # as long as ownership.new_run_id()'s ids
ENV_START_FIELD = 50  # 1-based field numbers of /proc/PID/stat (proc(5))
ENV_END_FIELD = 51


def environment_block() -> tuple[int, int] | None:
    """(start, end) addresses of this process's initial environment block, or None where /proc does not say."""
    try:
        with open("/proc/self/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()  # after the command name: field 3 onwards
        return int(fields[ENV_START_FIELD - 3]), int(fields[ENV_END_FIELD - 3])
    except (OSError, IndexError, ValueError):
        return None


def write_run_id(run_id: str) -> bool:
    """Write ``run_id`` over the placeholder in this process's ``/proc/self/environ``; False when there is no
    placeholder to write over (not forked from a zygote, another id length, no /proc)."""
    if len(run_id) != len(RUN_ID_PLACEHOLDER) or not run_id.isascii():
        return False
    block = environment_block()
    if block is None or block[1] <= block[0]:
        return False
    start, end = block
    data = ctypes.string_at(start, end - start)
    needle = f"{RUN_ID_ENV}={RUN_ID_PLACEHOLDER}\0".encode()
    at = data.find(needle)
    while at > 0 and data[at - 1] != 0:  # only a whole variable, not the end of another one's value
        at = data.find(needle, at + 1)
    if at < 0:
        return False
    ctypes.memmove(start + at + len(RUN_ID_ENV) + 1, run_id.encode("ascii"), len(run_id))
    return True
