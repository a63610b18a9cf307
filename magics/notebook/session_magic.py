"""``%%worker --session NAME``: start a session, or run the cell in the live one of that name.

``%%worker -n 2 --session train`` starts session ``train`` with this cell as its cell 1 (run again while the
session lives, it runs the cell in it: the launch flags then do not apply); ``%%worker --session train``
runs the next cell in the same processes (``--backend ray`` too: the session's workers are Ray-hosted, its
command socket is encrypted as the relay is). Each returns the cell's handle at once (its live view), or with
``--block`` waits, leaves the final summary, and raises ``RunFailed`` when the cell failed.
"""

from __future__ import annotations

import sys
from argparse import Namespace
from typing import Any

from IPython.core.error import UsageError

from nbworkers.magics.errors import LaunchError, RunFailed
from nbworkers.magics.launch.names import valid_name
from nbworkers.magics.notebook import registry
from nbworkers.magics.notebook.parse import build_spec, check_syntax
from nbworkers.magics.sessions.session import Session, SessionEnded
from nbworkers.magics.shapes import ClusterSnapshot

LAUNCH_ONLY = (("chief", "--chief"), ("evaluator", "--evaluator"), ("ps", "--ps"), ("push", "--push"))


def live_session(name: str):
    """The running session of that name in this kernel, or None."""
    try:
        cluster = registry.get(name)
    except KeyError:
        return None
    if isinstance(cluster, Session) and not cluster.done and not cluster._stop_event.is_set():
        return cluster
    return None


def check_session_args(args: Namespace) -> None:
    if not valid_name(args.session):
        raise LaunchError(f"--session {args.session!r}: use letters, digits, '.', '_' and '-' (at most 64).")
    if args.name and args.name != args.session:
        raise LaunchError("--session NAME is the cluster's name too: leave --name out.")
    used = [flag for attr, flag in LAUNCH_ONLY if getattr(args, attr, None)]
    if used:
        raise LaunchError(f"{', '.join(used)}: not available with --session (a session's workers are all "
                          "'worker' tasks running the same cells; --push: assign the values in a cell).")


def run_session_cell(magics: Any, args: Namespace, cell: str):
    try:
        check_session_args(args)
        if not cell.strip():
            raise LaunchError("the %%worker cell is empty: put the code to run in the session below the line.")
        check_syntax(cell)
        if args.timeout is not None and args.timeout <= 0:
            raise LaunchError(f"--timeout {args.timeout:g}: give a positive number of seconds.")
        session = live_session(args.session)
        if session is None:
            args.name = args.session
            spec = build_spec(args, cell, magics.shell.user_ns, taken=registry.names(),
                              running={c.name for c in registry.running()})
            spec.timeout = None  # --timeout applies to each cell, not to the session
            session = Session(spec)
            session.start()
            registry.add(session)
        cell_handle = session.submit(cell, timeout=args.timeout)
    except (LaunchError, SessionEnded) as error:
        raise UsageError(str(error)) from None
    if not args.block:
        return cell_handle
    cell_handle.show()
    try:
        cell_handle.wait(raise_on_failure=not getattr(args, "no_raise", False), echo=_echo())
    except KeyboardInterrupt:
        print(f"Stopped waiting; cell {cell_handle.number} of session {session.name!r} is still running. "
              f"`%workers stop {session.name} --cell` interrupts it.", file=sys.stderr)
    except RunFailed as error:
        raise error from None
    return None


def stop_cell(name: str) -> str:
    session = live_session(name)
    if session is None:
        raise UsageError(f"no live session named {name!r}: `%workers` lists them.")
    done = session.interrupt()
    return {
        "interrupting": f"interrupting the running cell of session {name!r} (KeyboardInterrupt on every worker)",
        "restarting": f"session {name!r}: second Stop, its processes restart and their state is gone",
        "idle": f"session {name!r} is idle: nothing to interrupt",
    }.get(done, done)


def session_column(snapshot: ClusterSnapshot) -> str:
    """`%workers` status suffix of a session: its cell count and idle/busy."""
    info = snapshot.get("session")
    if not info:
        return ""
    text = f" (session: {info['cells']} cell{'s' if info['cells'] != 1 else ''}, {info['state']}"
    if info.get("cell"):
        text += f" in cell {info['cell']}"
    return text + ")"


def _echo():
    """The workers' output written into the blocking cell as it comes (magics/views/echo.py), when available."""
    from nbworkers.magics.views.echo import blocking_echo

    return blocking_echo()
