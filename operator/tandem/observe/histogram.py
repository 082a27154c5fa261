"""Cumulative histograms: reading them from samples, window deltas, percentiles. Pure.

A Prometheus histogram is a list of cumulative buckets ``(le, count)`` ending at
``+Inf``, plus ``_sum`` and ``_count``. Over a window the autoscaler needs the
*delta* between two scrapes (a decrease anywhere means the process restarted, so the
current histogram is the delta) and percentiles of that delta, computed the way
PromQL's ``histogram_quantile`` does: find the bucket holding the rank and
interpolate linearly inside it, taking 0 as the lower bound of the first bucket and
answering the highest finite bound when the rank falls in ``+Inf``. Where observations
are made (the router's token gaps, the simulator's engines), :class:`BucketCounter` counts
them and gives the cumulative histogram a scrape reads.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tandem.observe.text import Sample, canonical_name

INF = math.inf
DEFAULT_PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets sorted by upper bound; the last bound is ``+Inf``."""

    buckets: tuple[tuple[float, float], ...]
    """``(upper bound, observations <= bound)``, cumulative, ending at ``+Inf``."""
    sum: float = 0.0
    """Sum of observed values (seconds for latency histograms)."""

    @property
    def count(self) -> float:
        """Observations in the histogram (the ``+Inf`` bucket)."""
        return self.buckets[-1][1] if self.buckets else 0.0


class BucketCounter:
    """Observation counts per bucket (not cumulative until :meth:`histogram`) and a sum."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        """Upper bounds, ascending, without ``+Inf`` (the last slot is ``+Inf``)."""
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        """Sum of observed values."""

    def observe(self, value: float, count: int = 1) -> None:
        """``count`` observations of ``value`` (Prometheus's ``le``: a bound is inclusive)."""
        self.counts[bisect_left(self.bounds, value)] += count
        self.total += value * count

    @property
    def count(self) -> int:
        return sum(self.counts)

    def histogram(self) -> Histogram:
        """The cumulative histogram a scrape would read now."""
        running = 0
        buckets: list[tuple[float, float]] = []
        for bound, n in zip((*self.bounds, INF), self.counts, strict=True):
            running += n
            buckets.append((bound, float(running)))
        return Histogram(buckets=tuple(buckets), sum=self.total)


def parse_histogram(
    by_name: Mapping[str, Sequence[Sample]], name: str, keep: Mapping[str, str] | None = None
) -> Histogram | None:
    """The histogram ``name`` summed over every label set, or ``None`` if absent.

    ``by_name`` is :meth:`Exposition.by_name`; ``keep`` restricts to samples whose
    labels include those values (``{"class": "gold"}``). A histogram without a
    ``+Inf`` bucket gets one from ``_count``.
    """
    base = canonical_name(name)
    want = dict(keep or {})
    counts: dict[float, float] = {}
    for sample in by_name.get(base + "_bucket", ()):
        if _matches(sample, want) and "le" in sample.labels and not math.isnan(sample.value):
            try:
                bound = float(sample.labels["le"])
            except ValueError:
                continue
            counts[bound] = counts.get(bound, 0.0) + sample.value
    total = _sum_values(by_name.get(base + "_count", ()), want)
    if not counts and total is None:
        return None
    if INF not in counts:
        counts[INF] = total if total is not None else max(counts.values())
    observed_sum = _sum_values(by_name.get(base + "_sum", ()), want) or 0.0
    return Histogram(buckets=_monotone(sorted(counts.items())), sum=observed_sum)


def merge_histograms(histograms: Iterable[Histogram | None]) -> Histogram | None:
    """The sum of several histograms (pods, engines). Bounds missing from one histogram
    take its count at the next lower bound it has, so the result stays cumulative."""
    present = [h for h in histograms if h is not None and h.buckets]
    if not present:
        return None
    bounds = sorted({bound for h in present for bound, _ in h.buckets})
    merged = [(bound, sum(_count_at(h, bound) for h in present)) for bound in bounds]
    return Histogram(buckets=tuple(merged), sum=sum(h.sum for h in present))


def compute_histogram_delta(previous: Histogram | None, current: Histogram) -> Histogram:
    """Observations between two scrapes of one process.

    Counters only grow, so a bucket that shrank (or different bounds) means the process
    restarted in between: everything it holds now arrived after the restart.
    """
    if previous is None or [b for b, _ in previous.buckets] != [b for b, _ in current.buckets]:
        return current
    pairs = zip(current.buckets, previous.buckets, strict=True)
    delta = [(bound, now - before) for (bound, now), (_, before) in pairs]
    if any(count < 0 for _, count in delta):
        return current
    return Histogram(buckets=tuple(delta), sum=max(current.sum - previous.sum, 0.0))


def compute_quantile(histogram: Histogram | None, q: float) -> float | None:
    """The ``q`` quantile (0-1), or ``None`` when the histogram holds no observations.

    Worked example: buckets ``(0.1, 2), (0.5, 10), (+Inf, 10)`` and ``q=0.5``: rank 5
    falls in ``(0.1, 0.5]`` which holds observations 3-10, so the answer is
    ``0.1 + (0.5 - 0.1) * (5 - 2) / (10 - 2) = 0.25``.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    if histogram is None or len(histogram.buckets) < 2 or histogram.count <= 0:
        return None
    buckets = histogram.buckets
    rank = q * histogram.count
    index = next(
        (i for i, (_, count) in enumerate(buckets[:-1]) if count >= rank and count > 0),
        len(buckets) - 1,
    )
    if index == len(buckets) - 1:
        return buckets[-2][0]
    upper, count = buckets[index]
    if index == 0 and upper <= 0:
        return upper
    lower, below = (0.0, 0.0) if index == 0 else buckets[index - 1]
    return lower + (upper - lower) * (rank - below) / (count - below)


def compute_percentiles(
    histogram: Histogram | None, percentiles: Iterable[int] = DEFAULT_PERCENTILES
) -> dict[int, float]:
    """Percentile (0-100) → value; empty when the histogram holds no observations."""
    out: dict[int, float] = {}
    for p in percentiles:
        value = compute_quantile(histogram, p / 100.0)
        if value is not None:
            out[p] = value
    return out


def compute_mean(histogram: Histogram | None) -> float | None:
    """Mean observation (``_sum / _count``); ``None`` when empty.

    >>> compute_mean(Histogram(((0.1, 1.0), (INF, 4.0)), sum=1.0))
    0.25
    """
    if histogram is None or histogram.count <= 0:
        return None
    return max(histogram.sum, 0.0) / histogram.count


def _matches(sample: Sample, want: Mapping[str, str]) -> bool:
    return all(sample.labels.get(key) == value for key, value in want.items())


def _sum_values(samples: Iterable[Sample], want: Mapping[str, str]) -> float | None:
    values = [s.value for s in samples if _matches(s, want) and not math.isnan(s.value)]
    return sum(values) if values else None


def _monotone(buckets: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Force cumulative counts to be non-decreasing, as PromQL does for torn scrapes."""
    out: list[tuple[float, float]] = []
    highest = 0.0
    for bound, count in buckets:
        highest = max(highest, count)
        out.append((bound, highest))
    return tuple(out)


def _count_at(histogram: Histogram, bound: float) -> float:
    below = 0.0
    for upper, count in histogram.buckets:
        if upper > bound:
            break
        below = count
    return below
