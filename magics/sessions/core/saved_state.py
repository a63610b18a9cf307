"""What a session's workers saved before its processes restarted, told to the user (pure: no I/O, no TensorFlow).

The session core (``sessions/core/cells.py``) collects the workers' ``saved`` answers (``events.WorkerSave``) in a
``SavedState``; its ``note`` goes into the failed cell's error and the session's ``lost_note``, its ``summary`` into
``%workers``. Worker 0's models, optimizers, variables and other trackables come back when the cells that build
them run again (the note names those cells: the workers report the cell that last bound each name), at once with
``NBWORKERS_RESTORE_ON_REBUILD`` (the default), else with ``%workers restore NAME``; every worker's arrays and
JSON values come back by themselves (``distlib/saved_state/namespace.py``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from nbworkers.magics.sessions.core.events import WorkerSave
from nbworkers.magics.sessions.core.notes import workers_text
from nbworkers.magics.sessions.core.records import cells_phrase

TF_KINDS = ("model", "variable", "checkpoint")  # worker 0's, restored into rebuilt objects by %workers restore
KIND_NAMES = {"model": "Keras model", "variable": "variable", "checkpoint": ""}  # a checkpoint's detail names it
MAX_LISTED = 8  # names listed of those left out (the workers' logs and manifests have them all)


@dataclass
class SavedState:
    """The answers to one ``save``: ``asked`` the workers that got it, ``reports`` worker -> its answer,
    ``wait`` the seconds the session waited for them (for the note of those that did not answer)."""

    cell: str  # the cell the save came after, as messages call it ("cell 3", "restore")
    asked: tuple[int, ...]
    reports: dict[int, WorkerSave] = field(default_factory=dict)
    wait: float = 0.0
    holder: int = 0  # the worker asked to save the models, optimizers and variables (worker 0 unless it is gone)
    gone: tuple[int, ...] = ()  # workers whose process was gone (killed): their own state is lost
    not_ended: tuple[int, ...] = ()  # workers told to end the cell that did not within the wait: not saved
    aborted: tuple[int, ...] = ()  # workers asked to save whose collectives had been aborted inside a step
    # the workers' cell numbers (every submitted cell's) -> the user's name for it (``CellRecord.ref``: "[5]", "3");
    # None: a cell nbworkers ran itself
    shown: dict[int, str | None] = field(default_factory=dict)

    @property
    def unanswered(self) -> tuple[int, ...]:
        return tuple(w for w in self.asked if w not in self.reports)

    def rebuilt(self) -> list[tuple[str, str, str]]:
        """(name, kind, detail) of the holder's models, variables and checkpointed objects (they need a rebuild)."""
        report = self.reports.get(self.holder)
        return [entry for entry in report.saved if entry[1] in TF_KINDS] if report and not report.error else []

    def values(self) -> list[str]:
        """The arrays and JSON values any worker saved (each comes back on its own worker by itself)."""
        names: list[str] = []
        for worker in sorted(self.reports):
            report = self.reports[worker]
            names += [name for name, kind, _ in report.saved if kind not in TF_KINDS and name not in names]
        return names

    def skipped(self) -> list[tuple[str, str]]:
        """(name, why) left out, worker 0's first (the others' only where they differ)."""
        seen: dict[str, str] = {}
        for worker in sorted(self.reports):
            for name, why in self.reports[worker].skipped:
                seen.setdefault(name, why)
        return list(seen.items())

    def folder(self) -> str:
        report = self.reports.get(self.holder) or next(iter(self.reports.values()), None)
        return report.folder.rsplit("/worker-", 1)[0] if report and report.folder else ""

    def built_in(self) -> dict[str, int]:
        """name -> the session cell that last bound it (the holder's: the one that saved the trackables), by the
        workers' number; a cell nbworkers ran itself is left out."""
        report = self.reports.get(self.holder)
        found = dict(report.built_in) if report else {}
        return {name: cell for name, cell in found.items() if self.ref(cell) is not None}

    def ref(self, cell: int) -> str | None:
        """The user's name for the workers' cell ``cell`` ("[5]", "3"); None: a cell nbworkers ran itself."""
        return self.shown.get(cell, str(cell))

    def cells_to_run(self, put_back: Collection[str] = ()) -> str:
        """"cell [4] (it built model, opt)", "cells [4] and [7] ([4] built model; [7] built opt)" (the notebook's
        numbers; "session cell 1 ..." for cells submitted from Python), or "the cells that build them" when the cells
        are not known (``put_back``: names back already, left out)."""
        rebuilt = [name for name, _, _ in self.rebuilt() if name not in put_back]
        cells = self.built_in()
        known = sorted({cells[name] for name in rebuilt if name in cells})
        unknown = [name for name in rebuilt if name not in cells]
        if not known:
            return f"the cells that build {', '.join(rebuilt)}"
        refs = [self.ref(cell) or str(cell) for cell in known]
        if len(known) == 1:
            text = f"{cells_phrase(refs)} (it built {', '.join(n for n in rebuilt if n in cells)})"
        else:
            built = "; ".join(f"{ref} built {', '.join(n for n in rebuilt if cells.get(n) == cell)}"
                              for cell, ref in zip(known, refs))
            text = f"{cells_phrase(refs)} ({built})"
        return text + (f" and the cells that build {', '.join(unknown)}" if unknown else "")

    def note(self, session: str) -> str:
        """What was saved, what comes back by itself, exactly what to run for the rest, what was not saved: one
        short item a line ("- kept: ..."), for the failed cell's list (``notes.with_notes``)."""
        return "\n".join(f"- {item}" for item in self.items(session))

    def items(self, session: str) -> list[str]:
        """``note``'s items, without their dashes."""
        items: list[str] = []
        rebuilt = self.rebuilt()
        values = self.values()
        if rebuilt:
            listed = ", ".join(f"{name} ({_kind_detail(kind, detail)})" for name, kind, detail in rebuilt)
            items.append(f"kept: worker {self.holder} saved {listed}")
        if values:
            items.append(f"kept: back by themselves in the new processes (each worker its own): {', '.join(values)}")
        if rebuilt:
            items.append(f"run: {self.cells_to_run()} again, to get {_them(rebuilt)} back (each saved object is put "
                         "back as soon as a cell builds it again, unless NBWORKERS_RESTORE_ON_REBUILD=0); or after "
                         f"{'it' if len({n for n, _, _ in rebuilt}) == 1 else 'them'} `%workers restore {session}`")
        if not rebuilt and not values and self.reports and not self.problems():
            items.append("nothing in the workers' namespaces could be saved (models, variables, arrays, JSON values)")
        items += self.problems()
        skipped = self.skipped()
        if skipped:
            shown = "; ".join(f"{name} ({why})" for name, why in skipped[:MAX_LISTED])
            more = f"; and {len(skipped) - MAX_LISTED} more" if len(skipped) > MAX_LISTED else ""
            items.append(f"not saved (not a kind nbworkers saves, or as said): {shown}{more}")
        if self.folder():
            items.append(f"saved in {self.folder()}")
        return items

    def problems(self) -> list[str]:
        """Workers that could not save, or did not answer in time."""
        found = [f"worker {w} could not save: {r.error}" for w, r in sorted(self.reports.items()) if r.error]
        late = self.unanswered
        if late:
            found.append(f"{workers_text(late)} did not answer the save within {self.wait:g} s: "
                         f"{'its' if len(late) == 1 else 'their'} state is gone")
        if self.not_ended:
            found.append(f"{workers_text(self.not_ended)} did not end the cell after the abort "
                         "(session_abort_grace), so "
                         f"{'it' if len(self.not_ended) == 1 else 'they'} could not save: "
                         f"{'its' if len(self.not_ended) == 1 else 'their'} state is gone")
        if self.gone:
            found.append(f"{workers_text(self.gone)} {'was' if len(self.gone) == 1 else 'were'} gone before the save "
                         f"(killed): {'its' if len(self.gone) == 1 else 'their'} own arrays and values are lost")
        if self.holder > 0 and 0 not in self.gone and 0 not in self.asked:
            found.append(f"worker 0 had not ended the cell, so worker {self.holder} saved the models and variables "
                         "in its place (every worker holds the same under MultiWorkerMirroredStrategy)")
        elif self.holder > 0 and 0 in self.aborted and self.holder not in self.aborted:
            found.append(f"worker 0 was stopped inside a training step, so worker {self.holder}, which ended the cell "
                         "between steps, saved the models and variables: the state of the last step every worker "
                         "finished")
        return found

    def summary(self, session: str, put_back: Collection[str] = ()) -> str:
        """One line for ``%workers``: what is waiting for ``%workers restore``; "" once every saved model and
        variable is back (``put_back``: by a rebuilding cell or ``%workers restore``)."""
        saved = [name for name, _, _ in self.rebuilt()]
        rebuilt = [name for name in saved if name not in put_back]
        if saved and not rebuilt:
            return ""
        text = f"{session}: saved before the restart after {self.cell}: "
        text += ", ".join(rebuilt) if rebuilt else "no model or variable"
        if rebuilt:
            text += f" (run {self.cells_to_run(put_back)} again; or after them `%workers restore {session}`)"
        values = self.values()
        if values:
            text += f"; put back by themselves: {', '.join(values)}"
        return text


def _kind_detail(kind: str, detail: str) -> str:
    """"Keras model: 4 weights ...", "variable: float32 ()", and a checkpoint's detail alone ("Adam: ...")."""
    name = KIND_NAMES.get(kind, kind)
    return f"{name}: {detail}" if name else detail


def _them(entries: list[tuple[str, str, str]]) -> str:
    return "it" if len(entries) == 1 else "them"

