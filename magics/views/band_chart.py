"""The compact view's chart: per metric the min-max band across workers, the chief's line, the outliers' lines.

One step grid for all (at most ~``max_points`` buckets of a power-of-two width of steps; a bucket holds each
worker's mean over its steps there), so 64 workers cost a few kilobytes a chart, not 64 series. The outliers are
found at the same steps (each worker's newest bucket against everyone's means there, compact.score_outliers), so
a straggler is not an outlier for being behind; the band leaves them out and they are drawn as lines.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from nbworkers.magics.views.compact import (
    MAX_OUTLIERS,
    METRIC_DIGITS,
    MIN_WORKERS_FOR_OUTLIERS,
    metric_items,
    score_outliers,
)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _width(span: float, max_points: int) -> int:
    """Bucket width in steps: a power of two, so the buckets stay put while the run grows."""
    width = 1
    while span / width > max_points:
        width *= 2
    return width


class _Buckets:
    """One worker's history in buckets: per bucket and metric a running sum and count, and the bucket's last step.

    Sums and counts are dicts of numbers, which Python's garbage collector does not track: 64 workers' buckets as
    ``[sum, count]`` lists were ~58,000 more objects for every full collection to walk (pauses of the kernel)."""

    def __init__(self) -> None:
        self.sums: dict[int, dict[str, float]] = {}
        self.counts: dict[int, dict[str, int]] = {}
        self.last_x: dict[int, float] = {}
        self.seen: Any = None  # the last history entry read (the state appends entries and never changes one)
        self.names: set[str] = set()
        self.recent: list[int] = []  # the buckets of the newest entries, newest first (two at most)

    def add(self, entries: Iterable[Sequence[Any]], width: int) -> set[int]:
        touched = set()
        for entry in entries:
            x, metrics = entry[0], entry[1]
            self.seen = entry
            if not _finite(x) or not isinstance(metrics, (dict, tuple, list)):
                continue
            key = math.floor(x / width)
            touched.add(key)
            if not self.recent or self.recent[0] != key:
                self.recent = [key, *self.recent[:1]]
            if x > self.last_x.get(key, -math.inf):
                self.last_x[key] = x
            sums = self.sums.get(key)
            if sums is None:
                sums = self.sums[key] = {}
                self.counts[key] = {}
            counts = self.counts[key]
            for name, value in metric_items(metrics):
                if (type(value) is float and value - value == 0) or type(value) is int:  # finite, not bool
                    if name not in sums:
                        self.names.add(name)
                        sums[name], counts[name] = 0.0, 0
                    sums[name] += value
                    counts[name] += 1
        return touched

    def widen(self) -> None:
        """Twice the bucket width: bucket k goes into k // 2 (the sums stay exact)."""
        sums: dict[int, dict[str, float]] = {}
        counts: dict[int, dict[str, int]] = {}
        last_x: dict[int, float] = {}
        for key, bucket in self.sums.items():
            into_sums, into_counts = sums.setdefault(key // 2, {}), counts.setdefault(key // 2, {})
            for name, total in bucket.items():
                into_sums[name] = into_sums.get(name, 0.0) + total
                into_counts[name] = into_counts.get(name, 0) + self.counts[key][name]
        for key, x in self.last_x.items():
            last_x[key // 2] = max(last_x.get(key // 2, x), x)
        self.sums, self.counts, self.last_x = sums, counts, last_x
        self.recent = list(dict.fromkeys(key // 2 for key in self.recent))

    def mean(self, key: int, name: str) -> float | None:
        total = self.sums.get(key, {}).get(name)
        return None if total is None else total / self.counts[key][name]


def _new_entries(history: Sequence[Sequence[Any]], seen: Any) -> Sequence[Sequence[Any]] | None:
    """The entries after ``seen`` (None: not found, read it all again)."""
    for position in range(len(history) - 1, -1, -1):
        if history[position] is seen:
            return history[position + 1:]
    return None


class ChartAccumulator:
    """The compact chart of one view, kept up to date from snapshot to snapshot.

    A history holds up to 2000 entries per worker; at 64 workers reading them all at every update (4 a second)
    took most of a core. This reads only the entries added since the previous snapshot (found by the identity of
    the last one read: the state appends entries and never changes one), keeps each worker's buckets (a power-of-two
    width of steps, doubled by merging pairs when the run outgrows ``max_points``) and recomputes the band only
    where a bucket changed. Entries the history dropped stay in the buckets: the chart keeps the whole run.

    ``update(workers)``, then ``outliers(...)`` (each worker against the others at its own newest steps), then
    ``payload(lines_of, outliers)``: the band leaves the outliers out (they are drawn as lines of their own).
    """

    def __init__(self, max_points: int):
        self.max_points = max_points
        self._clear()

    def _clear(self) -> None:
        self.width = 1
        self.workers: dict[int, _Buckets] = {}
        self.low_x = math.inf
        self.high_x = -math.inf
        self.band: dict[str, dict[int, tuple[float | int, float | int]]] = {}  # rounded (low, high) per bucket
        self.band_without: dict[str, frozenset[int]] = {}  # per metric, the workers the band leaves out
        self.last_x: dict[int, float] = {}  # per bucket, the last step any worker reported in it
        self.diverged: dict[str, set[int]] = {}  # per metric, workers whose newest value is not finite
        self._dirty: set[int] = set()  # buckets changed since the band was last brought up to date
        self.names: set[str] = set()  # every metric any worker reported

    def update(self, workers: Sequence[Mapping[str, Any]]) -> None:
        known = [self.workers.get(int(w.get("index") or 0)) for w in workers]
        if self.workers and all(b is None or _new_entries(w.get("history") or [], b.seen) is None
                                for b, w in zip(known, workers)):
            self._clear()  # a new run of the cell (every history started over): a new chart
        news = []
        self.diverged = {}
        for worker in workers:  # what is new, and how wide the buckets must be for it
            index = int(worker.get("index") or 0)
            for name, value in (worker.get("metrics") or {}).items():
                if isinstance(value, float) and not math.isfinite(value):
                    self.diverged.setdefault(name, set()).add(index)
            history = worker.get("history") or []
            buckets = self.workers.get(index)
            new = None if buckets is None else _new_entries(history, buckets.seen)
            if buckets is None or new is None:
                if buckets is not None:
                    self._dirty |= set(buckets.sums)
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
            self.band, self.band_without, self.last_x = {}, {}, {}
            self._dirty = {key for buckets in self.workers.values() for key in buckets.sums}
        for buckets, new in news:
            self._dirty |= buckets.add(new, self.width)
            self.names |= buckets.names
        for key in self._dirty:
            xs = [x for b in self.workers.values() if (x := b.last_x.get(key)) is not None]
            if xs:
                self.last_x[key] = max(xs)
            else:
                self.last_x.pop(key, None)

    def outliers(self, exclude: Collection[int] = (), limit: int = MAX_OUTLIERS) -> dict[str, list[int]]:
        """Per metric, the workers far from the others (compact.score_outliers) at the same steps: each worker's
        newest bucket (its previous one when too few others have reached it yet) against every worker's mean
        there; a worker whose newest value is not finite (``loss=nan``) is always one. At most ``limit``."""
        names = sorted(self.names | set(self.diverged))
        skip = set(exclude)
        found: dict[str, list[int]] = {}
        scores: dict[tuple[int, str], dict[int, float] | None] = {}  # (bucket, metric) -> scores there (None: few)
        for name in names:
            far: list[tuple[float, int]] = [(math.inf, i) for i in sorted(self.diverged.get(name, ())) if i not in skip]
            for index, buckets in self.workers.items():
                if index in skip or index in self.diverged.get(name, ()):
                    continue
                for key in buckets.recent:
                    if (key, name) not in scores:
                        values = [(i, m) for i, b in self.workers.items() if (m := b.mean(key, name)) is not None]
                        enough = len(values) >= MIN_WORKERS_FOR_OUTLIERS
                        scores[(key, name)] = {i: s for s, i in score_outliers(values)} if enough else None
                    at_key = scores[(key, name)]
                    if at_key is not None:
                        if index in at_key:
                            far.append((at_key[index], index))
                        break
            far.sort(key=lambda p: (-p[0], p[1]))
            if far:
                found[name] = [i for _, i in far[:limit]]
        return found

    def _refresh_band(self, outliers: Mapping[str, Collection[int]]) -> None:
        """The band of every metric over the workers that are not its outliers, where it changed."""
        for name in self.names:
            without = frozenset(outliers.get(name, ()))
            keys: Iterable[int] = self._dirty
            if self.band_without.get(name) != without:  # new outliers: the whole band of this metric again
                self.band_without[name] = without
                self.band[name] = {}
                keys = self.last_x
            per_key = self.band.setdefault(name, {})
            for key in keys:
                means = [m for i, b in self.workers.items()
                         if i not in without and (m := b.mean(key, name)) is not None]
                if means:
                    per_key[key] = (_round(min(means)), _round(max(means)))
                else:
                    per_key.pop(key, None)
        self._dirty = set()

    def payload(self, lines_of: Mapping[int, Collection[str] | None],
                outliers: Mapping[str, Collection[int]] | None = None) -> dict[str, Any]:
        """``{"x": [step...], "band": {metric: [lows, highs]}, "lines": [{"index", "metrics": {metric: [...]}}]}``
        over the buckets in step order; a bucket's x is the last step any worker reported in it. ``lines_of``: the
        workers drawn as lines, each with the metrics to send (None: all; an outlier's: those it is an outlier in).
        ``outliers``: per metric, the workers the band leaves out."""
        self._refresh_band(outliers or {})
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


def chart_payload(workers: Sequence[Mapping[str, Any]], max_points: int, chief: int) -> dict[str, Any]:
    """The compact chart of one snapshot: ``ChartAccumulator.payload`` with its outliers (``"outliers"``)."""
    chart = ChartAccumulator(max_points)
    chart.update(workers)
    found = chart.outliers(exclude=[chief])
    return {**chart.payload(lines_to_draw(chief, found), found), "outliers": found}


def _round(value: float) -> float | int:
    if float(value).is_integer() and abs(value) < 2**53:
        return int(value)
    return float(f"{value:.{METRIC_DIGITS}g}")
