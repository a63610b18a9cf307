"""The notebook's interrupt (■) while no cell runs but this kernel's workers do: one line saying how to stop them.

A ``%%worker`` cell without ``--block`` (a run, or a session cell) returns at once: its workers go on while the
kernel is idle, and ■ has nothing of them to interrupt. ipykernel ignores SIGINT between cells (it restores the
handler it saved before each cell, ``SIG_IGN``, after it), so ■ did nothing and said nothing. ``watch()``, called
by such a cell, replaces that saved ``SIG_IGN`` with ``on_idle_interrupt``: between cells SIGINT then prints one
line naming what runs and how to stop it (a session cell: its widget's Stop or ``%workers stop NAME --cell``; a
run: its widget's Stop or ``%workers stop NAME``), and is ignored as before otherwise. During a cell ipykernel's
own handler (``KeyboardInterrupt``) applies, unchanged. A handler of the user's own is left alone; outside
ipykernel (a terminal IPython) nothing changes. The line goes under the newest such cell (a print between cells
has no parent message, which a front end shows nowhere).
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from typing import Any

from nbworkers.magics.notebook import registry


def stop_hint(clusters: Iterable[Any]) -> str:
    """The line ■ prints while ``clusters`` (this kernel's running ones) go on without a cell waiting for them;
    "" when none of them runs anything."""
    parts = []
    for cluster in clusters:
        if cluster.done:
            continue
        cells = getattr(cluster, "cells", None)  # a session's (magics/sessions/session.py); a run has none
        if cells is not None:
            running = [cell for cell in cells if not cell.done]
            if running:
                parts.append(f"session {cluster.name}'s {running[0].label}: its widget's Stop or "
                             f"`%workers stop {cluster.name} --cell` (`%workers stop {cluster.name}` ends the session)")
        else:
            parts.append(f"run {cluster.name}: its widget's Stop or `%workers stop {cluster.name}`")
    if not parts:
        return ""
    return "nbworkers: ■ interrupts this kernel, not the workers (the cell returned at once). To stop " + \
        "; ".join(parts) + "."


_cells: dict[str, tuple[Any, dict[str, Any]]] = {}  # cluster name -> (kernel, the execute request of its newest cell)


def on_idle_interrupt(signum: int, frame: Any) -> None:
    """SIGINT between cells (ipykernel ignores it there): the stop hint, when something runs, under the newest
    cell that started something still running."""
    running = registry.running()
    hint = stop_hint(running)
    if not hint:
        return
    names = {cluster.name for cluster in running}
    newest = [cell for name, cell in _cells.items() if name in names]
    if not newest:
        print(hint, flush=True)
        return
    kernel, parent = newest[-1]
    kernel.session.send(kernel.iopub_socket, "stream", {"name": "stdout", "text": hint + "\n"}, parent=parent,
                        ident=kernel._topic("stream"))


def watch(shell: Any, name: str) -> bool:
    """Make ``on_idle_interrupt`` the kernel's handler between cells, for the cell now running, which started
    ``name`` and returns at once; True when it is (now or already)."""
    kernel: Any = getattr(shell, "kernel", None)
    saved = getattr(kernel, "saved_sigint_handler", None)
    if kernel is None or (saved is not on_idle_interrupt and saved is not signal.SIG_IGN):
        return False  # not inside ipykernel's cell hooks, or a handler of the user's own
    running = {cluster.name for cluster in registry.running()}
    for ended in [known for known in _cells if known not in running or known == name]:
        del _cells[ended]
    _cells[name] = (kernel, kernel.get_parent("shell"))
    kernel.saved_sigint_handler = on_idle_interrupt  # ipykernel restores it after the cell
    return True
