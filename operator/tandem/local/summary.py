"""What a ``tandem up`` run achieved, from what its clients saw: the summary it ends with
and the series of its plot. Pure.

Definitions are the fleet simulator's (:mod:`tandem.sim.compare.results`), so a local
run and a simulated one read the same way:

* a request is **served** when its stream ended with a ``finish_reason`` and no error;
  every other request **failed** (an HTTP error, a stream cut with an SSE error or a
  closed connection, or still unfinished when the run ended), counted by cause;
* **TTFT** percentiles are over served requests (send to first token; one that streamed
  no text has none); **ITL**
  percentiles over every gap between two tokens any client saw;
* **attainment** is the share of requests sent that were served within both targets
  (:func:`~tandem.report.stats.meets_targets`; a failed request never meets them);
* **GPU-seconds** of a pool: each pod's life, from its start to its process being
  reaped (cold start and drain included), times the pool's ``gpu.count``; pod-seconds
  are the same without the GPU count (a ``sim`` pool may declare none).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tandem.policy.config import LatencyTargets
from tandem.report.figure import LoadSeries, RunSeries
from tandem.report.stats import meets_targets, percentile

#: Causes of a failed request, as the summary counts them.
UNFINISHED = "unfinished at the end"


@dataclass
class RequestRecord:
    """One replayed request as its client saw it (seconds on the run's clock)."""

    sent_s: float
    prompt_tokens: int
    max_tokens: int
    token_s: list[float] = field(default_factory=list)
    """When each streamed token arrived."""
    finish_reason: str | None = None
    error: str | None = None
    """Why it failed: ``HTTP 503``, ``stream cut``, ``connection closed``; ``None`` while
    it runs or once served."""

    @property
    def served(self) -> bool:
        return self.error is None and self.finish_reason is not None

    @property
    def ttft_s(self) -> float:
        """Send to first token; NaN without one."""
        return self.token_s[0] - self.sent_s if self.token_s else math.nan

    @property
    def tpot_s(self) -> float:
        """Mean gap between its tokens after the first (NaN with fewer than two)."""
        if len(self.token_s) < 2:
            return math.nan
        return (self.token_s[-1] - self.token_s[0]) / (len(self.token_s) - 1)


@dataclass(frozen=True)
class PodLife:
    """One engine pod, from its start to its process being reaped (or now)."""

    role: str
    started_s: float
    ended_s: float


@dataclass(frozen=True)
class ScaleEvent:
    """One change of a pool's size, with the autoscaler's reason."""

    t_s: float
    pool: str
    from_replicas: int
    to_replicas: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` timeline's shape: ``{"t", "pool", "from", "to", "reason"}``."""
        return {
            "t": round(self.t_s, 2),
            "pool": self.pool,
            "from": self.from_replicas,
            "to": self.to_replicas,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class LatencyFigures:
    """Percentiles of one latency (seconds; NaN when nothing was measured) and its target."""

    p50_s: float
    p90_s: float
    p99_s: float
    percentile: int
    """The target's percentile (90 for ``{p90: 1s}``)."""
    at_percentile_s: float
    """What was measured at that percentile."""
    target_s: float | None

    @property
    def met(self) -> bool | None:
        """Whether the measured percentile is within the target (None: no target or no
        measurement)."""
        if self.target_s is None or math.isnan(self.at_percentile_s):
            return None
        return self.at_percentile_s <= self.target_s


@dataclass(frozen=True)
class UpSummary:
    """What ``tandem up`` prints when it ends."""

    sent: int
    served: int
    failures: Mapping[str, int]
    """Cause → failed requests."""
    fitted: int
    """Requests shortened to fit ``model.maxModelLen``."""
    output_tokens: int
    ttft: LatencyFigures
    itl: LatencyFigures
    attainment: float
    """Share of the requests sent that were served within both targets (NaN: none sent)."""
    pod_s: Mapping[str, float]
    gpu_s: Mapping[str, float]
    peak_replicas: Mapping[str, int]
    decisions: tuple[ScaleEvent, ...]

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def compute_summary(
    records: Sequence[RequestRecord],
    targets: LatencyTargets,
    lives: Sequence[PodLife],
    gpus_per_replica: Mapping[str, int],
    decisions: Sequence[ScaleEvent],
    fitted: int = 0,
) -> UpSummary:
    """The summary of a run from its requests, its pods' lives and its decisions.

    >>> t = LatencyTargets(ttft_s=1.0, ttft_percentile=90, itl_s=0.1, itl_percentile=90)
    >>> fast = RequestRecord(0.0, 10, 3, [0.5, 0.55, 0.6], finish_reason="length")
    >>> slow = RequestRecord(0.0, 10, 3, [2.0, 2.05, 2.1], finish_reason="length")
    >>> cut = RequestRecord(0.0, 10, 3, [0.4], error="stream cut")
    >>> s = compute_summary([fast, slow, cut], t, [PodLife("decode", 0.0, 10.0)],
    ...                     {"decode": 2}, [])
    >>> s.sent, s.served, dict(s.failures), round(s.attainment, 3), s.gpu_s["decode"]
    (3, 2, {'stream cut': 1}, 0.333, 20.0)
    >>> s.ttft.at_percentile_s, s.ttft.met
    (2.0, False)
    """
    served = [r for r in records if r.served]
    failures = Counter(r.error or UNFINISHED for r in records if not r.served)
    ttfts = sorted(r.ttft_s for r in served if r.token_s)
    gaps = sorted(b - a for r in records for a, b in zip(r.token_s, r.token_s[1:], strict=False))
    met = sum(1 for r in served if meets_targets(r.ttft_s, r.tpot_s, targets, r.prompt_tokens))
    pod_s: dict[str, float] = dict.fromkeys(gpus_per_replica, 0.0)
    for life in lives:
        pod_s[life.role] = pod_s.get(life.role, 0.0) + max(life.ended_s - life.started_s, 0.0)
    return UpSummary(
        sent=len(records),
        served=len(served),
        failures=dict(sorted(failures.items())),
        fitted=fitted,
        output_tokens=sum(len(r.token_s) for r in records),
        ttft=_figures(ttfts, targets.ttft_percentile, targets.ttft_s),
        itl=_figures(gaps, targets.itl_percentile, targets.itl_s),
        attainment=met / len(records) if records else math.nan,
        pod_s=pod_s,
        gpu_s={role: s * gpus_per_replica.get(role, 0) for role, s in pod_s.items()},
        peak_replicas=compute_peak_replicas(lives),
        decisions=tuple(decisions),
    )


def _figures(sorted_s: Sequence[float], pct: int, target_s: float | None) -> LatencyFigures:
    return LatencyFigures(
        p50_s=percentile(sorted_s, 0.5),
        p90_s=percentile(sorted_s, 0.9),
        p99_s=percentile(sorted_s, 0.99),
        percentile=pct,
        at_percentile_s=percentile(sorted_s, pct / 100.0),
        target_s=target_s,
    )


def compute_peak_replicas(lives: Sequence[PodLife]) -> dict[str, int]:
    """The most pods each pool had alive at once.

    >>> compute_peak_replicas([PodLife("decode", 0, 10), PodLife("decode", 5, 8),
    ...                        PodLife("decode", 10, 12), PodLife("prefill", 0, 1)])
    {'decode': 2, 'prefill': 1}
    """
    peaks: dict[str, int] = {}
    for role in sorted({life.role for life in lives}):
        # Ends sort before starts at the same instant: a replacement is not a peak.
        edges = sorted(
            [(life.started_s, 1) for life in lives if life.role == role]
            + [(life.ended_s, -1) for life in lives if life.role == role]
        )
        alive = peak = 0
        for _, step in edges:
            alive += step
            peak = max(peak, alive)
        peaks[role] = peak
    return peaks


def format_summary(summary: UpSummary, title: str) -> list[str]:
    """The summary as plain text lines (no colour: it is also read in logs and CI)."""
    failed = ", ".join(f"{cause}: {n}" for cause, n in summary.failures.items())
    lines = [
        title,
        f"requests    {summary.sent} sent, {summary.served} served, {summary.failed} failed"
        + (f" ({failed})" if failed else "")
        + f"; {summary.output_tokens} tokens streamed",
    ]
    if summary.fitted:
        lines.append(f"            {summary.fitted} shortened to fit model.maxModelLen")
    lines += [
        _latency_line("TTFT", summary.ttft, 1.0, "s"),
        _latency_line("ITL", summary.itl, 1000.0, "ms"),
        f"attainment  {_share(summary.attainment)} of requests served within both targets",
        f"{'pool':10} {'peak':>5} {'pod-s':>9} {'GPU-s':>9}",
    ]
    for role, pod_s in summary.pod_s.items():
        peak = summary.peak_replicas.get(role, 0)
        lines.append(f"{role:10} {peak:>5} {pod_s:>9.1f} {summary.gpu_s[role]:>9.1f}")
    lines.append(f"scale decisions: {len(summary.decisions)}")
    lines += [f"  t={d.t_s:7.1f}s  {d.reason}" for d in summary.decisions]
    return lines


def _latency_line(name: str, f: LatencyFigures, scale: float, unit: str) -> str:
    values = "   ".join(
        f"p{p} {_num(v * scale)} {unit}" for p, v in ((50, f.p50_s), (90, f.p90_s), (99, f.p99_s))
    )
    if f.target_s is None:
        verdict = "no target"
    else:
        word = {True: "met", False: "MISSED", None: "no data"}[f.met]
        verdict = f"target p{f.percentile} <= {_num(f.target_s * scale)} {unit}: {word}"
    return f"{name:11} {values}   {verdict}"


def _num(value: float) -> str:
    """Three significant digits, no exponent for the latencies people read.

    >>> _num(0.01234), _num(12.34), _num(1234.5), _num(float("nan"))
    ('0.0123', '12.3', '1234', '-')
    """
    if math.isnan(value):
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _share(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 100:.1f} %"


def build_series(
    records: Sequence[RequestRecord],
    pools: Mapping[str, Sequence[Mapping[str, float]]],
    targets: LatencyTargets,
    end_s: float,
    step_s: float,
) -> tuple[LoadSeries, RunSeries]:
    """The plot's series, one point per ``step_s`` up to ``end_s``: requests and prompt
    tokens sent per second, the pools' sizes (``pools`` is the ``--json`` timeline's
    ``{"t", "desired", "ready"}`` samples), and the TTFT and token gaps of each interval
    at the targets' percentiles.

    >>> t = LatencyTargets(ttft_s=1.0, ttft_percentile=90, itl_s=0.1, itl_percentile=90)
    >>> r = RequestRecord(0.5, 100, 2, [1.2, 1.3], finish_reason="length")
    >>> load, run = build_series([r], {"decode": [{"t": 0, "desired": 1, "ready": 0},
    ...     {"t": 1.5, "desired": 2, "ready": 1}]}, t, end_s=2.0, step_s=1.0)
    >>> load.requests_per_s, load.prompt_tokens_per_s, run.replicas["decode"], run.ready
    ([0.0, 1.0, 0.0], [0.0, 100.0, 0.0], [1, 1, 2], {'decode': [0, 0, 1]})
    >>> round(run.ttft_s[2], 2), round(run.itl_s[2], 2), math.isnan(run.ttft_s[1])
    (0.7, 0.1, True)
    """
    points = [0.0]
    while points[-1] < end_s:
        points.append(min(points[-1] + step_s, end_s))
    sent = sorted((r.sent_s, r.prompt_tokens) for r in records)
    sent_s = [s for s, _ in sent]
    prompt_prefix = [0]
    for _, tokens in sent:
        prompt_prefix.append(prompt_prefix[-1] + tokens)
    firsts = sorted((r.token_s[0], r.ttft_s) for r in records if r.served and r.token_s)
    first_s = [f for f, _ in firsts]
    gap_at = sorted(
        (b, b - a) for r in records for a, b in zip(r.token_s, r.token_s[1:], strict=False)
    )
    gap_s = [g for g, _ in gap_at]
    requests, prompts, ttft, itl = [], [], [], []
    for k, t in enumerate(points):
        t0 = points[k - 1] if k else -math.inf
        width = t - t0 if k else 1.0
        a, b = bisect_right(sent_s, t0), bisect_right(sent_s, t)
        requests.append((b - a) / width if k else 0.0)
        prompts.append((prompt_prefix[b] - prompt_prefix[a]) / width if k else 0.0)
        lo, hi = bisect_right(first_s, t0), bisect_right(first_s, t)
        ttft.append(percentile(sorted(v for _, v in firsts[lo:hi]), targets.ttft_percentile / 100))
        lo, hi = bisect_right(gap_s, t0), bisect_right(gap_s, t)
        itl.append(percentile(sorted(v for _, v in gap_at[lo:hi]), targets.itl_percentile / 100))
    replicas = {role: _held(samples, points, "desired") for role, samples in pools.items()}
    ready = {role: _held(samples, points, "ready") for role, samples in pools.items()}
    load = LoadSeries(points, requests, prompts)
    return load, RunSeries(points, replicas, ttft, itl, ready)


def _held(samples: Sequence[Mapping[str, float]], points: Sequence[float], key: str) -> list[int]:
    """The last sampled ``key`` at or before each point (0 before the first sample)."""
    times = [s["t"] for s in samples]
    out = []
    for t in points:
        i = bisect_left(times, t + 1e-9) - 1
        out.append(int(samples[i][key]) if i >= 0 else 0)
    return out
