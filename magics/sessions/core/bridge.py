"""Between the run's supervisor core and the session core: each one's decisions as the other's events (pure).

The two cores never call each other. What the supervisor decided that matters to the cells (a restart: their
state is gone; a failure: the session is being stopped) becomes a session event; what the session core decides
that needs the processes (a restart because their state is lost; a cell event that shows the run is not stalled)
becomes a request to the run loop, which hands it to the supervisor after the event it is handling (one queue).
Where the processes are, for the session core, is ``group``'s answer from what the run says.
"""

from __future__ import annotations

from nbworkers.magics.run.core import events as run_ev
from nbworkers.magics.run.core.failures import UserRestart
from nbworkers.magics.sessions.core import events as ev
from nbworkers.magics.sessions.core.events import Group


def session_event(action: run_ev.Action, error: str) -> ev.Event | None:
    """The session core's event for the supervisor's ``action`` (``error``: the run's, once it failed); None: the
    action is the processes' alone."""
    match action:
        case run_ev.RestartScheduled():
            return ev.GroupRestarting(str(action.cause), on_purpose=isinstance(action.cause, UserRestart))
        case run_ev.SaveBeforeRestart():
            return ev.SaveRequested(str(action.cause), action.alive, on_purpose=isinstance(action.cause, UserRestart))
        case run_ev.Failed():
            return ev.GroupFailed(error)
    return None


def run_event(action: ev.Action) -> run_ev.Event | None:
    """The supervisor's event for the session core's ``action``; None: the session carries it out itself."""
    match action:
        case ev.RestartLosingState():  # after the session's own save: the supervisor does not hold it again
            return run_ev.RestartRequested(UserRestart(action.reason), saved=True)
        case ev.SaveFinished():
            return run_ev.SaveEnded()
        case ev.MarkProgress():
            return run_ev.Progress(action.worker)
    return None


def group(*, ending: bool, restart_pending: bool, connected: bool) -> Group:
    """Where the processes are: ``ending`` (stopping, or the run ended), a restart under way, every worker
    connected to the command socket or not yet."""
    if ending:
        return Group.STOPPING
    if restart_pending:
        return Group.RESTARTING
    return Group.READY if connected else Group.CONNECTING
