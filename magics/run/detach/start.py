"""The kernel's side of ``%%worker --detach``: start the run's own supervisor process and wait for its answer.

The process (``detached.py``) runs the run loop outside the kernel, in a new session (a kernel restart or crash,
which the kernel manager may deliver to the kernel's whole process group, does not reach it). The kernel writes it
the launch (pickled: kernel -> its own child; nothing from a worker is ever unpickled here), reads one JSON line
back (started, or refused and why) and keeps nothing of it: from then on the run is read from its state file and
asked to stop or restart through its request files (``%workers attach``, the REST API, the sidebar). The kernel
never signals the process: stopping it is a stop request, which ends its run and so the process.

The process starts with ``-P`` (``dirs.module_command``) in a private folder of its own, not in the notebook's
folder (another user may be able to put a ``pickle.py`` there): the cell's folder travels in the launch
(``LaunchSpec.cwd``), where the workers run. Its stderr is a file in that folder until its run directory exists,
then that directory's ``supervisor.log``; a start that fails says where to read it (``start_log.py``).
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

from nbworkers.magics.backends import registry
from nbworkers.magics.errors import LaunchError
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.run.detach import start_log
from nbworkers.magics.run.detach.supervisor import DetachRequest, settings_values
from nbworkers.magics.rundir import layout as rundir
from nbworkers.magics.settings import WorkerSettings
from nbworkers.protocol import wire
from nbworkers.protocol.private.dirs import module_command

SUPERVISOR_MODULE = "nbworkers.magics.run.detach.supervisor"


class DetachFailed(RuntimeError):
    """The supervisor process could not start the run (not a refusal of the launch: a bug or a broken install)."""


def start_detached(spec: LaunchSpec, config: WorkerSettings, python: str = sys.executable,
                   spawn: Callable[..., Any] = subprocess.Popen, module: str = SUPERVISOR_MODULE) -> Path:
    """Start ``spec``'s run in a supervisor process of its own (``module``: a plain run's, or a detached
    session's, magics/sessions/detach/supervisor.py); its run directory once it runs.

    ``LaunchError``: the launch was refused (nothing left behind, as for a run in the kernel)."""
    if spec.backend not in registry.names(_can_detach):
        raise LaunchError(f"--detach: not with --backend {spec.backend} ({registry.titles(_can_detach)} only); run it "
                          "without --detach (it then ends with its kernel).")
    push = pickle.dumps(spec.push) if spec.push else None  # passed on as bytes: its values' classes are ours
    shipped = dataclasses.replace(spec, push=dict.fromkeys(spec.push))  # the names alone
    values = settings_values(config)
    root = rundir.run_root(config.run_root).absolute()  # the supervisor runs elsewhere: no relative run root
    values["run_root"] = str(root)
    folder = start_log.start_dir(spec.name)  # private: its working directory, its stderr's first file
    request = pickle.dumps(DetachRequest(shipped, values, push, start_dir=str(folder)))
    env = dict(os.environ)
    env[wire.ENV_RUN_DIR] = str(rundir.path_for(spec.name, root))  # procs/strays.py finds it by this
    log = start_log.open_log(folder)
    try:
        process = spawn(  # our own module, this interpreter, -P: no folder of the notebook's on sys.path
            module_command(python, module), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=log, cwd=str(folder), start_new_session=True, close_fds=True, env=env,
        )
    except BaseException:
        start_log.discard(folder)
        raise
    finally:
        os.close(log)
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
        raise DetachFailed(start_log.failure_text(
            f"the detached run's supervisor process ended without starting the run (exit code "
            f"{process.returncode}).", folder))
    if not answer.get("ok"):
        process.wait()
        if answer.get("launch_error"):
            start_log.discard(folder)  # refused before anything ran: nothing to read
            raise LaunchError(str(answer.get("error")))
        raise DetachFailed(start_log.failure_text(
            f"the detached run's supervisor process failed:\n{answer.get('error')}\n", folder))
    # reaped when it ends (no zombie in this kernel's process table); the kernel never waits on it otherwise
    threading.Thread(target=process.wait, daemon=True, name="nbworkers-detached-reaper").start()
    return Path(str(answer["run_dir"]))


def _can_detach(kind: registry.BackendKind[Any]) -> bool:
    return kind.can_detach
