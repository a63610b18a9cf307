"""``%%worker --session NAME``: start a session, or run the cell in the live one of that name.

``%%worker -n 2 --session train`` starts session ``train`` with this cell as its cell 1 (run again while the
session lives, it runs the cell in it: the launch flags then do not apply); ``%%worker --session train``
runs the next cell in the same processes (``--backend ray`` too: the session's workers are Ray-hosted, its
command socket is encrypted as the relay is). Each returns the cell's handle at once (its live view, the
workers' rich outputs and then the cell's value under it), or with
``--block`` waits, leaves the final summary, shows the workers' rich output (``display``, ``plt.show()``) as it
comes, raises ``RunFailed`` when the cell failed, and returns the cell's last expression (its ``Out``).

The notebook's interrupt (■) during that wait (or during ``%workers wait`` on a session) is Stop: the cell is
interrupted on every worker at the same step, the wait goes on (at most ``session_interrupt_wait`` seconds) until
it ended, and the notebook cell ends as interrupted (``CellStopped``: "stopped by you at step N"); the session
and its state live on. Without ``--block`` the cell returned at once, and ■ has nothing of it to interrupt: it
prints how to stop it instead (``idle_interrupt.py``).
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any, Sequence

from IPython.core.error import UsageError

from nbworkers.magics.errors import CellStopped, LaunchError, RunFailed
from nbworkers.magics.launch.names import valid_name
from nbworkers.magics.notebook import idle_interrupt, registry
from nbworkers.magics.notebook.parse import build_spec, check_syntax
from nbworkers.magics.notebook.remote.detached_session import detached_session, start_detached_session
from nbworkers.magics.sessions.core.events import InterruptOutcome
from nbworkers.magics.sessions.detach.client import SessionRefused
from nbworkers.magics.sessions.session import NothingToRestore, Session, SessionEnded
from nbworkers.magics.settings import settings
from nbworkers.magics.shapes import ClusterSnapshot
from nbworkers.protocol.private.dirs import UnsafeDirectory
from nbworkers.protocol.statuses import CellState

LAUNCH_ONLY = (("chief", "--chief"), ("evaluator", "--evaluator"), ("ps", "--ps"), ("push", "--push"))


def live_session(name: str):
    """The running session of that name in this kernel, or None."""
    try:
        cluster = registry.get(name)
    except KeyError:
        return None
    if isinstance(cluster, Session) and not cluster.done and not cluster.stop_requested:
        return cluster
    return None


def check_session_args(args: Namespace) -> None:
    if not valid_name(args.session):
        raise LaunchError(f"--session {args.session!r}: use letters, digits, '.', '_' and '-' (at most 64).")
    if args.name and args.name != args.session:
        raise LaunchError("--session NAME is the cluster's name too: leave --name out.")
    if getattr(args, "min_workers", None) is not None:
        raise LaunchError("--min-workers: not available with --session (a session's state lives in its processes, "
                          "and a change of size restarts them). Leave it out; a plain %%worker run can be elastic.")
    used = [flag for attr, flag in LAUNCH_ONLY if getattr(args, attr, None)]
    if used:
        raise LaunchError(f"{', '.join(used)}: not available with --session (a session's workers are all "
                          "'worker' tasks running the same cells; --push: use "
                          "nbworkers.session(NAME).push(name=value)).")


def run_session_cell(magics: Any, args: Namespace, cell: str):
    try:
        check_session_args(args)
        if not cell.strip():
            raise LaunchError("the %%worker cell is empty: put the code to run in the session below the line.")
        check_syntax(cell)
        if args.timeout is not None and args.timeout <= 0:
            raise LaunchError(f"--timeout {args.timeout:g}: give a positive number of seconds.")
        session = live_session(args.session) or detached_session(args.session)  # a detached one: any kernel's
        if session is None:
            args.name = args.session
            spec = build_spec(args, cell, magics.shell.user_ns, taken=registry.names(),
                              running={c.name for c in registry.running()})
            spec.timeout = None  # --timeout applies to each cell, not to the session
            if args.detach if args.detach is not None else settings().detach:
                session = start_detached_session(spec)  # its supervisor process serves it (detached_session.py)
            else:
                session = Session(spec)
                session.start()
                registry.add(session)
        cell_handle = session.submit(cell, timeout=args.timeout, display=getattr(args, "display", "0") or "0",
                                     prompt=execution_count(magics.shell))
    except (LaunchError, SessionEnded, SessionRefused, UnsafeDirectory) as error:  # SessionRefused: a detached one's
        raise UsageError(str(error)) from None
    if not args.block:
        idle_interrupt.watch(magics.shell, session.name)  # ■ while it runs and the kernel is idle: says how to stop it
        return cell_handle
    cell_handle.blocking = True
    echo = _echo()
    cell_handle.echoed = echo is not None  # the lines are in the cell: the widget shows no second copy of them
    try:
        with cell_handle.waited():  # a cell that ends before the wait begins leaves its summary to the wait
            cell_handle.show()
            cell_handle.wait(raise_on_failure=not getattr(args, "no_raise", False), echo=echo)
    except KeyboardInterrupt:
        stop_on_interrupt(session, [cell_handle], echo)
    except RunFailed as error:
        raise error from None
    return cell_handle.value  # the cell's last expression: the notebook cell's Out (None: no Out)


def execution_count(shell: Any) -> int | None:
    """The notebook's number of the cell running now (its ``[5]``), so that a session's messages name its cells as
    the notebook shows them; None without a shell or outside a stored cell. Read from the cell's own
    ``ExecutionResult`` (the display hook holds it while the cell runs): ``shell.execution_count`` is already the
    next cell's in IPython 9, which counts up before the cell runs, and this cell's in IPython 8."""
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    count = getattr(result, "execution_count", None)
    return count if type(count) is int and count > 0 else None


def stop_on_interrupt(session: Any, cells: Sequence[Any], echo: Any = None) -> None:
    """The notebook's interrupt reached a wait for ``cells`` (the last is the one waited for): Stop them as the
    widget does (queued ones are cancelled, the running one interrupted on every worker), wait at most
    ``session_interrupt_wait`` seconds for the last to end, and raise ``CellStopped`` saying what happened. A
    second interrupt meanwhile only ends the wait (a second Stop would restart the processes: the widget's Stop
    and ``%workers stop NAME --cell`` do that on purpose). Returns when the cells had ended already."""
    pending = [cell for cell in cells if not cell.done]
    if not pending:
        return
    restarts = session.restarts
    for cell in reversed(pending):  # the queued ones first: none of them starts once the running one stopped
        session.interrupt(cell)
    last = cells[-1]
    limit = session.settings.session_interrupt_wait
    try:
        last.wait(limit, raise_on_failure=False, echo=echo)
    except KeyboardInterrupt:
        pass
    where = f"session {session.name!r} {last.label}"
    if not last.done:
        raise CellStopped(f"{where}: Stop sent; still running {limit:g} s later (stuck in a collective?). The session "
                          f"restarts its processes after {session.settings.session_interrupt_grace:g} s; "
                          f"`%workers stop {session.name} --cell` restarts them now (their state is lost).")
    if last.state == CellState.FINISHED:
        return
    if last.state == CellState.STOPPED and session.restarts == restarts:
        raise CellStopped(f"{where} {last.error}; the session and its state live on")
    raise CellStopped(f"{where}: {last.error}")


def stop_cell(name: str) -> str:
    session = live_session(name) or detached_session(name)
    if session is None:
        raise UsageError(f"no live session named {name!r}: `%workers` lists them.")
    done = session.interrupt()
    said: dict[str, str] = {
        InterruptOutcome.INTERRUPTING:
            f"interrupting the running cell of session {name!r} (KeyboardInterrupt on every worker)",
        InterruptOutcome.RESTARTING: f"session {name!r}: second Stop, its processes restart and their state is gone",
        InterruptOutcome.IDLE: f"session {name!r} is idle: nothing to interrupt",
    }
    return said.get(done, done)


def restore_session(name: str) -> None:
    """`%workers restore NAME`: put back what the session's workers saved before its processes last restarted
    (models, variables, checkpointed objects into the objects of the same names, rebuilt by the cells run since;
    arrays and values by name), on every worker, as a blocking cell of the session."""
    session = live_session(name) or detached_session(name)  # a detached one: its supervisor restores
    if session is None:
        raise UsageError(f"no live session named {name!r}: `%workers` lists them.")
    try:
        cell = session.restore()
    except (SessionEnded, NothingToRestore, SessionRefused) as error:
        raise UsageError(str(error)) from None
    cell.blocking = True
    echo = _echo()
    cell.echoed = echo is not None
    cell.show()
    try:
        cell.wait(echo=echo)
    except KeyboardInterrupt:
        stop_on_interrupt(session, [cell], echo)
    except RunFailed as error:
        raise error from None


def saved_lines(snapshots: Sequence[ClusterSnapshot]) -> list[str]:
    """`%workers` lines under the table: what each session saved before its last restart and how to restore it."""
    return [info["saved"] for info in (s.get("session") or {} for s in snapshots) if info.get("saved")]


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
