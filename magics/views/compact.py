"""The compact view of a run with many workers: the same data in fewer pixels and fewer bytes.
The chart (a min-max band, the chief's line, the outliers' lines) is band_chart.py's.

From ``settings().widget_compact_workers`` workers on (8), the widget and the text/HTML summary stop showing
one card, one chart line and one log per worker. What they show instead is computed here, in the kernel, from a
``ClusterSnapshot`` (pure functions: no widget, no I/O):

- ``steady_order`` / ``straggler_order``: the workers in the order a reader wants them, steady enough to click:
  by status (failed and stuck ones first, the finished ones last), within a status the lagging workers first
  (``lagging_workers``: behind the furthest one by more than ``LAG_ENTER`` of the run, with hysteresis), else by
  index. Tiny differences of progress or steps/s between equal workers move no row; ``SteadyRows`` keeps the
  lagging ones from update to update;
- ``shared_metrics``: the metrics every reporting worker holds with the same value (a global batch's loss under
  MultiWorkerMirroredStrategy): shown once, not 64 times;
- ``score_outliers``: the values far from the others' median (robust z-score); band_chart.py compares each worker
  with the others at the same steps, so a straggler's higher loss of an earlier step is no outlier;
- ``flagged_workers`` / ``log_workers``: whose log tails are sent: the chief, the workers whose tail shows an
  error or a warning, and the one the reader picked.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from nbworkers.protocol.statuses import WorkerStatus

# The compact view's rows, worst first: a worker that failed or was lost, then one restarting, stopping, starting,
# waiting, running, and the ones that ended as meant.
STATUS_RANK: dict[str, int] = {status: rank for rank, status in enumerate((
    WorkerStatus.FAILED, WorkerStatus.LOST, WorkerStatus.RESTARTING, WorkerStatus.STOPPING, WorkerStatus.STARTING,
    WorkerStatus.WAITING, WorkerStatus.RUNNING, WorkerStatus.STOPPED, WorkerStatus.FINISHED))}
UNKNOWN_RANK = STATUS_RANK[WorkerStatus.STARTING]  # a status not reported yet ranks as starting
MAX_OUTLIERS = 4  # lines per metric drawn beside the chief's; the band shows the rest
OUTLIER_SCORE = 5.0  # robust z-score (deviation from the median over 1.4826 MADs) that makes a worker an outlier
MIN_WORKERS_FOR_OUTLIERS = 4  # fewer: no median worth the name
MAX_FLAGGED_LOGS = 6  # log tails of flagged workers sent with the chief's; the picker reaches the others
FLAG_WORDS = ("error", "warning", "traceback", "exception", "fatal")  # as words, any case: a *_error metric is none
# A worker lags once it is behind the furthest worker of its status by more than LAG_ENTER of the whole run (0.05:
# 5 percentage points of progress; without totals: 5 % of the furthest one's steps), and lags no more once it is
# within LAG_LEAVE: between the two it keeps the state it had, so a worker near the threshold does not flap.
LAG_ENTER = 0.05
LAG_LEAVE = 0.02
METRIC_DIGITS = 6  # significant digits two values must share to count as equal (as widget.clean_number rounds)


def metric_items(metrics: Any) -> Iterable[tuple[str, Any]]:
    """A history entry's metrics as (name, value) pairs: the state keeps a tuple of pairs (magics/run/core/state.py);
    a ``{name: value}`` dict is read too."""
    return metrics.items() if isinstance(metrics, dict) else metrics


def is_compact(workers: int, threshold: int) -> bool:
    return threshold > 0 and workers >= threshold


def chief_index(workers: Sequence[Mapping[str, Any]]) -> int:
    """The chief's index, else the first worker's (MWMS has no chief task: worker 0 plays it)."""
    for worker in workers:
        if worker.get("role") == "chief":
            return int(worker.get("index") or 0)
    return int(workers[0].get("index") or 0) if workers else 0


def progress_fraction(worker: Mapping[str, Any]) -> float | None:
    """How far a worker is, 0..1 (epochs and steps are 1-based as Keras prints them); None when unknown."""
    if worker.get("status") == WorkerStatus.FINISHED:
        return 1.0
    epoch, epochs_total = worker.get("epoch"), worker.get("epochs_total")
    step, steps_total = worker.get("step"), worker.get("steps_total")
    within = step / steps_total if step is not None and steps_total else 0.0
    if epoch is not None and epochs_total:
        return min(1.0, (max(epoch - 1, 0) + within) / epochs_total)
    if step is not None and steps_total:
        return min(1.0, within)
    return None


def _index(worker: Mapping[str, Any]) -> int:
    return int(worker.get("index") or 0)


def _positions(group: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """How far each worker of one status is, comparable within the group: its progress fraction when every worker
    has one, else its step over the furthest one's (workers with neither are left out)."""
    fractions = {_index(w): progress_fraction(w) for w in group}
    if all(f is not None for f in fractions.values()):
        return {i: f for i, f in fractions.items() if f is not None}
    steps = {_index(w): float(w["step"]) for w in group if isinstance(w.get("step"), (int, float))}
    lead = max(steps.values(), default=0.0)
    return {i: step / lead for i, step in steps.items()} if lead > 0 else {}


def lagging_workers(workers: Sequence[Mapping[str, Any]], before: Collection[int] = ()) -> set[int]:
    """The workers behind the furthest worker of their status by more than ``LAG_ENTER`` (those in ``before``,
    the lagging ones of the last update: by more than ``LAG_LEAVE``)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for worker in workers:
        groups.setdefault(str(worker.get("status") or ""), []).append(worker)
    lagging: set[int] = set()
    for group in groups.values():
        positions = _positions(group)
        lead = max(positions.values(), default=0.0)
        for index, position in positions.items():
            if lead - position > (LAG_LEAVE if index in before else LAG_ENTER):
                lagging.add(index)
    return lagging


def steady_order(workers: Sequence[Mapping[str, Any]], lagging: Collection[int]) -> list[int]:
    """Worker indices, the ones that need a look first: by status (failed, lost, restarting, ...), then the
    ``lagging`` ones, then by index. Nothing else moves a row: not steps/s, not a step more or less."""

    def key(worker: Mapping[str, Any]) -> tuple[int, int, int]:
        index = _index(worker)
        return (STATUS_RANK.get(worker.get("status") or "", UNKNOWN_RANK), 0 if index in lagging else 1, index)

    return [_index(w) for w in sorted(workers, key=key)]


def straggler_order(workers: Sequence[Mapping[str, Any]]) -> list[int]:
    """``steady_order`` of one snapshot on its own (the text/HTML summary): lagging by ``LAG_ENTER``."""
    return steady_order(workers, lagging_workers(workers))


class SteadyRows:
    """The compact view's row order kept from update to update: the lagging workers of the last update stay
    lagging until they are within ``LAG_LEAVE`` (``lagging_workers``)."""

    def __init__(self) -> None:
        self.lagging: set[int] = set()

    def update(self, workers: Sequence[Mapping[str, Any]]) -> list[int]:
        self.lagging = lagging_workers(workers, self.lagging)
        return steady_order(workers, self.lagging)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and not (math.isfinite(a) and math.isfinite(b)):
        return str(a) == str(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return f"{a:.{METRIC_DIGITS}g}" == f"{b:.{METRIC_DIGITS}g}"
    return bool(a == b)


def shared_metrics(workers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The metrics every worker that reported any holds, with one value (to 6 digits); needs two such workers."""
    reporting = [w.get("metrics") or {} for w in workers if w.get("metrics")]
    if len(reporting) < 2:
        return {}
    first = reporting[0]
    return {name: value for name, value in first.items()
            if all(name in m and _same_value(m[name], value) for m in reporting[1:])}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def score_outliers(values: Sequence[tuple[int, float]], skip: Collection[int] = ()) -> list[tuple[float, int]]:
    """``(score, index)`` of the values far from their median, the farthest first: the robust z-score
    ``|v - median| / (1.4826 MAD)`` above ``OUTLIER_SCORE`` (when most values agree exactly: any other value); a
    non-finite value (a diverged ``loss=nan``) scores infinity. Needs ``MIN_WORKERS_FOR_OUTLIERS`` finite values."""
    finite = [v for _, v in values if math.isfinite(v)]
    if len(finite) < MIN_WORKERS_FOR_OUTLIERS:
        return [(math.inf, i) for i, v in values if not math.isfinite(v) and i not in skip]
    median = statistics.median(finite)
    mad = statistics.median(abs(v - median) for v in finite)
    scale = 1.4826 * mad if mad > 0 else 1e-9 + 1e-6 * abs(median)
    threshold = OUTLIER_SCORE if mad > 0 else 1.0
    scored = [(math.inf if not math.isfinite(v) else abs(v - median) / scale, i) for i, v in values if i not in skip]
    return sorted(((score, i) for score, i in scored if score > threshold), key=lambda p: (-p[0], p[1]))


def shows_trouble(text: str) -> bool:
    """Whether ``text`` holds one of ``FLAG_WORDS`` as a word (not inside ``mean_squared_error``), in any case.
    ``str.find`` over the lowered text: a case-blind regular expression with word boundaries took ~0.4 s over 64
    full log tails."""
    low = text.lower()
    for word in FLAG_WORDS:
        at = low.find(word)
        while at >= 0:
            end = at + len(word)
            before = low[at - 1] if at else " "
            after = low[end] if end < len(low) else " "
            if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
                return True
            at = low.find(word, end)
    return False


def flagged_workers(workers: Sequence[Mapping[str, Any]]) -> list[int]:
    """Workers that failed or whose log tail shows an error, a traceback or a warning (in index order)."""
    return [int(w.get("index") or 0) for w in workers
            if w.get("status") == WorkerStatus.FAILED or shows_trouble("\n".join(w.get("log_tail") or []))]


class FlagScanner:
    """``flagged_workers`` kept from snapshot to snapshot: reads only the lines a worker logged since the last one
    (its ``log_total`` grew by that many; the open last line is read again). Scanning 64 full tails at every update
    took ~70 ms. A flag stays until the worker's log starts over (a new run): the warning is still in its log."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}  # worker index -> its log_total at the last scan
        self.flagged: set[int] = set()

    def update(self, workers: Sequence[Mapping[str, Any]]) -> list[int]:
        for worker in workers:
            index = int(worker.get("index") or 0)
            total = int(worker.get("log_total") or 0)
            tail = worker.get("log_tail") or []
            before = self.seen.get(index)
            if before is None or total < before:
                self.flagged.discard(index)
                fresh = tail
            else:
                fresh = tail[-(total - before + 1):] if tail else []
            self.seen[index] = total
            if worker.get("status") == WorkerStatus.FAILED or (fresh and shows_trouble("\n".join(fresh))):
                self.flagged.add(index)
        return sorted(self.flagged)


def log_workers(workers: Sequence[Mapping[str, Any]], flagged: Sequence[int], picked: int | None) -> list[int]:
    """Whose log tails the compact widget receives: the chief, the first flagged ones, the picked one."""
    chosen = [chief_index(workers), *flagged[:MAX_FLAGGED_LOGS]]
    if picked is not None and 0 <= picked < len(workers):
        chosen.append(picked)
    return sorted(set(chosen))
