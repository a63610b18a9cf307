"""The compact view of a run with many workers: the same data in fewer pixels and fewer bytes.

From ``settings().widget_compact_workers`` workers on (8), the widget and the text/HTML summary stop showing
one card, one chart line and one log per worker. What they show instead is computed here, in the kernel, from a
``ClusterSnapshot`` (pure functions: no widget, no I/O):

- ``straggler_order``: the workers in the order a reader wants them: failed and stuck ones first, then the
  running ones from least to most progress (slowest first on a tie), the finished ones last;
- ``shared_metrics``: the metrics every reporting worker holds with the same value (a global batch's loss under
  MultiWorkerMirroredStrategy): shown once, not 64 times;
- ``chart_payload``: one chart in a few kilobytes whatever the number of workers: for every metric the min-max
  band across workers, and the lines of the chief and of the outliers only, all on one downsampled step grid
  (``max_points`` buckets; a bucket holds each worker's mean over its steps there);
- ``outliers``: per metric, the workers whose latest value is far from the others' median (robust z-score);
- ``flagged_workers`` / ``log_workers``: whose log tails are sent: the chief, the workers whose tail shows an
  error or a warning, and the one the reader picked.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

# the order of statuses in the rows: what needs a look first
STATUS_RANK = {"failed": 0, "lost": 1, "restarting": 2, "stopping": 3, "starting": 4, "waiting": 5, "running": 6,
               "stopped": 7, "finished": 8}  # fmt: skip
MAX_OUTLIERS = 4  # lines per metric drawn beside the chief's; the band shows the rest
OUTLIER_SCORE = 3.5  # robust z-score (deviation from the median over 1.4826 MADs) that makes a worker an outlier
MIN_WORKERS_FOR_OUTLIERS = 4  # fewer: no median worth the name
MAX_FLAGGED_LOGS = 6  # log tails of flagged workers sent with the chief's; the picker reaches the others
FLAG_PATTERN = re.compile(r"\b(?:error|warning|traceback|exception|fatal)\b", re.IGNORECASE)
METRIC_DIGITS = 6  # significant digits two values must share to count as equal (as widget.clean_number rounds)


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
    if worker.get("status") == "finished":
        return 1.0
    epoch, epochs_total = worker.get("epoch"), worker.get("epochs_total")
    step, steps_total = worker.get("step"), worker.get("steps_total")
    within = step / steps_total if step is not None and steps_total else 0.0
    if epoch is not None and epochs_total:
        return min(1.0, (max(epoch - 1, 0) + within) / epochs_total)
    if step is not None and steps_total:
        return min(1.0, within)
    return None


def straggler_order(workers: Sequence[Mapping[str, Any]]) -> list[int]:
    """Worker indices, the ones that need a look first: by status (failed, lost, restarting, ...), then the
    least progress, then the fewest steps a second."""

    def key(worker: Mapping[str, Any]) -> tuple[int, float, float, int]:
        fraction = progress_fraction(worker)
        rate = worker.get("steps_per_sec")
        return (STATUS_RANK.get(worker.get("status") or "", 4), -1.0 if fraction is None else fraction,
                rate if isinstance(rate, (int, float)) else -1.0, int(worker.get("index") or 0))

    return [int(w.get("index") or 0) for w in sorted(workers, key=key)]


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


def outliers(workers: Sequence[Mapping[str, Any]], exclude: Iterable[int] = (),
             limit: int = MAX_OUTLIERS) -> dict[str, list[int]]:
    """Per metric, the workers whose latest value is far from the median (``|v - median| / (1.4826 MAD)`` above
    ``OUTLIER_SCORE``; when most workers agree exactly, any other value), the farthest first, at most ``limit``.
    A non-finite value (a diverged ``loss=nan``) is always an outlier. Metrics equal everywhere have none."""
    skip = set(exclude)
    names = sorted({name for w in workers for name in (w.get("metrics") or {})})
    found: dict[str, list[int]] = {}
    for name in names:
        values: list[tuple[int, float]] = []
        for w in workers:
            value = (w.get("metrics") or {}).get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values.append((int(w.get("index") or 0), float(value)))
        finite = [v for _, v in values if math.isfinite(v)]
        if len(finite) < MIN_WORKERS_FOR_OUTLIERS:
            continue
        median = statistics.median(finite)
        mad = statistics.median(abs(v - median) for v in finite)
        scale = 1.4826 * mad if mad > 0 else 1e-9 + 1e-6 * abs(median)
        limit_score = OUTLIER_SCORE if mad > 0 else 1.0
        scored = [(math.inf if not math.isfinite(v) else abs(v - median) / scale, i) for i, v in values]
        far = sorted(((s, i) for s, i in scored if s > limit_score and i not in skip), key=lambda p: (-p[0], p[1]))
        if far:
            found[name] = [i for _, i in far[:limit]]
    return found


def flagged_workers(workers: Sequence[Mapping[str, Any]]) -> list[int]:
    """Workers that failed or whose log tail shows an error, a traceback or a warning (in index order)."""
    return [int(w.get("index") or 0) for w in workers
            if w.get("status") == "failed" or FLAG_PATTERN.search("\n".join(w.get("log_tail") or []))]


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
            if worker.get("status") == "failed" or (fresh and FLAG_PATTERN.search("\n".join(fresh))):
                self.flagged.add(index)
        return sorted(self.flagged)


def log_workers(workers: Sequence[Mapping[str, Any]], flagged: Sequence[int], picked: int | None) -> list[int]:
    """Whose log tails the compact widget receives: the chief, the first flagged ones, the picked one."""
    chosen = [chief_index(workers), *flagged[:MAX_FLAGGED_LOGS]]
    if picked is not None and 0 <= picked < len(workers):
        chosen.append(picked)
    return sorted(set(chosen))


# --------------------------------------------------------------------------------------------------- chart


def _width(span: float, max_points: int) -> int:
    """Bucket width in steps: a power of two, so the buckets stay put while the run grows."""
    width = 1
    while span / width > max_points:
        width *= 2
    return width


class _Buckets:
    """One worker's history in buckets: per bucket and metric a running sum and count, and the bucket's last step."""

    def __init__(self) -> None:
        self.sums: dict[int, dict[str, list[float]]] = {}
        self.last_x: dict[int, float] = {}
        self.seen: Any = None  # the metrics dict of the last history entry read (entries are never changed)

    def add(self, entries: Iterable[Sequence[Any]], width: int) -> set[int]:
        touched = set()
        for entry in entries:
            x, metrics = entry[0], entry[1]
            self.seen = metrics
            if not _finite(x) or not isinstance(metrics, dict):
                continue
            key = math.floor(x / width)
            touched.add(key)
            if x > self.last_x.get(key, -math.inf):
                self.last_x[key] = x
            bucket = self.sums.setdefault(key, {})
            for name, value in metrics.items():
                if (type(value) is float and value - value == 0) or type(value) is int:  # finite, not bool
                    total = bucket.setdefault(name, [0.0, 0])
                    total[0] += value
                    total[1] += 1
        return touched

    def widen(self) -> None:
        """Twice the bucket width: bucket k goes into k // 2 (the sums stay exact)."""
        sums: dict[int, dict[str, list[float]]] = {}
        last_x: dict[int, float] = {}
        for key, bucket in self.sums.items():
            merged = sums.setdefault(key // 2, {})
            for name, (total, count) in bucket.items():
                into = merged.setdefault(name, [0.0, 0])
                into[0] += total
                into[1] += count
        for key, x in self.last_x.items():
            last_x[key // 2] = max(last_x.get(key // 2, x), x)
        self.sums, self.last_x = sums, last_x

    def mean(self, key: int, name: str) -> float | None:
        total = self.sums.get(key, {}).get(name)
        return total[0] / total[1] if total else None


def _new_entries(history: Sequence[Sequence[Any]], seen: Any) -> Sequence[Sequence[Any]] | None:
    """The entries after the one whose metrics dict is ``seen`` (None: not found, read it all again)."""
    for position in range(len(history) - 1, -1, -1):
        if history[position][1] is seen:
            return history[position + 1:]
    return None


class ChartAccumulator:
    """The compact chart of one view, kept up to date from snapshot to snapshot.

    A history holds up to 2000 entries per worker; at 64 workers reading them all at every update (4 a second)
    took most of a core. This reads only the entries added since the previous snapshot (found by the identity of
    their metrics dict: the state appends and never changes one), keeps each worker's buckets (a power-of-two
    width of steps, doubled by merging pairs when the run outgrows ``max_points``) and recomputes the band only
    where a bucket changed. Entries the history dropped stay in the buckets: the chart keeps the whole run.
    """

    def __init__(self, max_points: int):
        self.max_points = max_points
        self.width = 1
        self.workers: dict[int, _Buckets] = {}
        self.low_x = math.inf
        self.high_x = -math.inf
        self.band: dict[str, dict[int, tuple[float | int, float | int]]] = {}  # rounded (low, high) per bucket
        self.last_x: dict[int, float] = {}  # per bucket, the last step any worker reported in it

    def update(self, workers: Sequence[Mapping[str, Any]]) -> None:
        dirty: set[int] = set()
        news = []
        for worker in workers:  # what is new, and how wide the buckets must be for it
            index = int(worker.get("index") or 0)
            history = worker.get("history") or []
            buckets = self.workers.get(index)
            new = None if buckets is None else _new_entries(history, buckets.seen)
            if buckets is None or new is None:
                if buckets is not None:
                    dirty |= set(buckets.sums)
                buckets = self.workers[index] = _Buckets()
                new = history
            for entry in new:
                if _finite(entry[0]):
                    self.low_x, self.high_x = min(self.low_x, entry[0]), max(self.high_x, entry[0])
            news.append((buckets, new))
        if self.high_x < self.low_x:
            return
        if (self.high_x - self.low_x) / self.width > self.max_points:
            while (self.high_x - self.low_x) / self.width > self.max_points:
                self.width *= 2
                for buckets in self.workers.values():
                    buckets.widen()
            self.band, self.last_x = {}, {}
            dirty = {key for buckets in self.workers.values() for key in buckets.sums}
        for buckets, new in news:
            dirty |= buckets.add(new, self.width)
        for key in dirty:
            xs = [x for b in self.workers.values() if (x := b.last_x.get(key)) is not None]
            if xs:
                self.last_x[key] = max(xs)
            names = {n for buckets in self.workers.values() for n in buckets.sums.get(key, ())}
            for name in names:
                means = [m for b in self.workers.values() if (m := b.mean(key, name)) is not None]
                if means:
                    self.band.setdefault(name, {})[key] = (_round(min(means)), _round(max(means)))

    def payload(self, lines_of: Mapping[int, Collection[str] | None]) -> dict[str, Any]:
        """``{"x": [step...], "band": {metric: [lows, highs]}, "lines": [{"index", "metrics": {metric: [...]}}]}``
        over the buckets in step order; a bucket's x is the last step any worker reported in it. ``lines_of``: the
        workers drawn as lines, each with the metrics to send (None: all; an outlier's: those it is an outlier in)."""
        keys = sorted(self.last_x)
        band = {}
        for name in sorted(self.band):
            per_key = self.band[name]
            pairs = [per_key.get(key) for key in keys]
            band[name] = [[None if p is None else p[0] for p in pairs], [None if p is None else p[1] for p in pairs]]
        lines = []
        for index in sorted(lines_of):
            buckets = self.workers.get(index)
            if buckets is None:
                continue
            wanted = lines_of[index]
            names = sorted({n for bucket in buckets.sums.values() for n in bucket if wanted is None or n in wanted})
            lines.append({"index": index, "metrics": {
                name: [None if (m := buckets.mean(key, name)) is None else _round(m) for key in keys]
                for name in names}})
        return {"x": [_round(self.last_x[k]) for k in keys], "band": band, "lines": lines}


def lines_to_draw(chief: int, outliers: Mapping[str, Sequence[int]]) -> dict[int, set[str] | None]:
    """The chief's line in every metric, each outlier's in the metrics it is an outlier in."""
    drawn: dict[int, set[str] | None] = {}
    for name, indices in outliers.items():
        for index in indices:
            wanted = drawn.setdefault(index, set())
            if wanted is not None:
                wanted.add(name)
    drawn[chief] = None
    return drawn


def chart_payload(workers: Sequence[Mapping[str, Any]], max_points: int,
                  lines_of: Mapping[int, Collection[str] | None]) -> dict[str, Any]:
    """The compact chart of one snapshot (``ChartAccumulator.payload``): for every metric the min-max band of the
    workers' bucket means on a shared step grid of at most ~max_points buckets, and the lines of ``lines_of`` (the
    chief and the outliers) on the same grid; everyone counts in the band."""
    chart = ChartAccumulator(max_points)
    chart.update(workers)
    return chart.payload(lines_of)


def _round(value: float) -> float | int:
    if float(value).is_integer() and abs(value) < 2**53:
        return int(value)
    return float(f"{value:.{METRIC_DIGITS}g}")
