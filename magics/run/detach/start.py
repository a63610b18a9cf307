"""The kernel's side of ``%%worker --detach``: start the run's own supervisor process and wait for its answer.

The process (``detached.py``) runs the run loop outside the kernel, in a new session (a kernel restart or crash,
which the kernel manager may deliver to the kernel's whole process group, does not reach it). The kernel writes it
the launch (pickled: kernel -> its own child; nothing from a worker is ever unpickled here), reads one JSON line
back (started, or refused and why) and keeps nothing of it: from then on the run is read from its state file and
asked to stop or restart through its request files (``%workers attach``, the REST API, the sidebar). The kernel
never signals the process: stopping it is a stop request, which ends its run and so the process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.run.detach.supervisor import DetachRequest, settings_values
from nbworkers.magics.rundir import layout as rundir
from nbworkers.magics.settings import WorkerSettings
from nbworkers.protocol import wire

SUPERVISOR_MODULE = "nbworkers.magics.run.detach.supervisor"


class DetachFailed(RuntimeError):
    """The supervisor process could not start the run (not a refusal of the launch: a bug or a broken install)."""


def start_detached(spec: LaunchSpec, config: WorkerSettings, python: str = sys.executable,
                   spawn: Callable[..., Any] = subprocess.Popen, module: str = SUPERVISOR_MODULE) -> Path:
    """Start ``spec``'s run in a supervisor process of its own (``module``: a plain run's, or a detached
    session's, magics/sessions/detach/supervisor.py); its run directory once it runs.

    ``LaunchError``: the launch was refused (nothing left behind, as for a run in the kernel)."""
    if spec.backend not in ("local", "ray"):
        raise LaunchError(f"--detach: not with --backend {spec.backend} (local and ray only); run it without "
                          "--detach (it then ends with its kernel).")
    push = pickle.dumps(spec.push) if spec.push else None  # passed on as bytes: its values' classes are ours
    shipped = dataclasses.replace(spec, push=dict.fromkeys(spec.push))  # the names alone
    request = pickle.dumps(DetachRequest(shipped, settings_values(config), push))
    env = dict(os.environ)
    env[wire.ENV_RUN_DIR] = str(rundir.path_for(spec.name, config.run_root))  # procs/strays.py finds it by this
    process = spawn(  # our own module, this interpreter (unit tests: a fake)
        [python, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True, env=env,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(request)
        process.stdin.close()
    except BrokenPipeError:
        pass
    line = process.stdout.readline()  # its answer; EOF if it died before answering
    process.stdout.close()
    try:
        answer = json.loads(line) if line.strip() else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        process.wait()
        raise DetachFailed(f"the detached run's supervisor process ended without starting the run (exit code "
                           f"{process.returncode}).")
    if not answer.get("ok"):
        process.wait()
        if answer.get("launch_error"):
            raise LaunchError(str(answer.get("error")))
        raise DetachFailed(f"the detached run's supervisor process failed:\n{answer.get('error')}")
    # reaped when it ends (no zombie in this kernel's process table); the kernel never waits on it otherwise
    threading.Thread(target=process.wait, daemon=True, name="nbworkers-detached-reaper").start()
    return Path(str(answer["run_dir"]))
