"""Worker status changes sent to the notebook ("waiting" while the cluster connects, then "running")."""

from __future__ import annotations

from nbworkers.protocol import wire
from nbworkers.protocol.statuses import WorkerStatus

_last_state: str | None = None


def send_status(state: WorkerStatus, detail: str = "") -> None:
    """Send ``state`` to the notebook when it differs from the last one sent; a no-op outside %%worker."""
    global _last_state
    if state == _last_state:
        return
    sender = wire.process_sender()
    if sender is None:
        return
    _last_state = state
    sender.send("status", state=state.value, detail=detail)
