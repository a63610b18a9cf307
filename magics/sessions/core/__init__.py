"""A session's pure core: its cells' lifecycle (``cells.py``, ``SessionCore``: events in, actions out, on an
injected clock), its events and actions (``events.py``), what the workers saved before a restart
(``saved_state.py``) and the bridge to the run's supervisor core (``bridge.py``). No threads, sockets, processes or
shell here (an import-linter contract in pyproject.toml): the session participant (``magics/sessions/participant.py``)
carries the actions out."""

from nbworkers.magics.sessions.core.cells import SessionCore
from nbworkers.magics.sessions.core.records import CellRecord, SessionTimings

__all__ = ["CellRecord", "SessionCore", "SessionTimings"]
