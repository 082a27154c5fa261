"""What a run achieved: SLO attainment, goodput, latency percentiles, GPU-hours. Pure.

* A request **meets the SLO** when it completed and met its class's targets
  (:func:`~tandem.report.stats.meets_targets`: its TTFT within the TTFT target plus
  ``perPromptToken`` x its prompt tokens, its mean token gap within the ITL target).
  **Attainment** is the share of requests that meet it (invalid requests, whose prompt
  exceeds the context, excluded).
* A request is **infeasible** when no fleet size could meet its targets: alone on idle
  engines of the fleet's pools its first token comes after its TTFT target, or a decode
  step of it alone exceeds the ITL target (:mod:`tandem.sim.fleet.least`).
  **Feasible attainment** is the attainment over the other requests.
* **Goodput**: requests (and output tokens) per second that met the SLO, over the
  trace's span.
* **TTFT percentiles** are over completed requests; **ITL percentiles** over every
  token gap clients saw (what the ITL target's percentile is about); both nearest-rank
  (:mod:`tandem.report.stats`).
* **GPU-hours** per pool: each pod from its scale-up request to its removal (cold
  start and drain included), times its GPUs, until the last request ended.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass

from tandem.api.vocab import PoolRole
from tandem.report.stats import meets_targets, percentile, weighted_percentiles
from tandem.sim.fleet.least import LeastLatencies
from tandem.sim.fleet.requests import COMPLETED, INVALID, REJECTED
from tandem.sim.fleet.simulation import Simulation


@dataclass(frozen=True)
class Timeline:
    """The run over time, one point per timeline interval (for the plot)."""

    t_s: tuple[float, ...]
    arrivals_per_s: tuple[float, ...]
    prompt_tokens_per_s: tuple[float, ...]
    replicas: Mapping[str, tuple[int, ...]]
    """Pods the Deployment had (starting or ready) at each point, by pool."""
    ready: Mapping[str, tuple[int, ...]]
    ttft_p90_s: tuple[float, ...]
    """TTFT p90 of requests whose first token came in the interval (NaN: none)."""
    itl_p90_s: tuple[float, ...]
    """p90 of the token gaps of the interval (NaN: none)."""


@dataclass(frozen=True)
class RunResult:
    """One policy's run of one trace."""

    policy: str
    requests: int
    completed: int
    rejected: int
    aborted: int
    invalid: int
    met: int
    attainment: float
    infeasible: int
    """Requests no fleet size could serve within their targets (invalid ones aside)."""
    attainment_feasible: float
    """Share of the feasible requests that met both targets."""
    absorbed: int
    """Requests a decode pod prefilled itself (a prefill burst absorbed)."""
    goodput_rps: float
    goodput_tokens_per_s: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    itl_p50_s: float
    itl_p90_s: float
    itl_p99_s: float
    gpu_hours: float
    gpu_hours_by_pool: Mapping[str, float]
    peak_replicas: Mapping[PoolRole, int]
    scale_changes: int
    """Ticks at which some pool's size changed."""
    end_s: float
    """When the last request ended (virtual seconds)."""
    timeline: Timeline


def summarize(sim: Simulation, policy: str) -> RunResult:
    """The figures of a finished simulation."""
    t = sim.table
    first = sim.options.first_measured
    n = len(t) - first
    targets = {name: sim.plan.targets_for(name) for name in set(t.klass)}
    least = LeastLatencies(sim.plan)
    ttfts: list[float] = []
    met = completed = rejected = aborted = invalid = infeasible = met_infeasible = 0
    met_tokens = 0
    for i in range(first, len(t)):
        outcome = t.outcome[i]
        target = targets[t.klass[i]]
        ttft_target = target.ttft_for(t.prompt_tokens[i])
        feasible = outcome == INVALID or (
            (ttft_target is None or least.ttft_s(t.prompt_tokens[i]) < ttft_target)
            and (
                target.itl_s is None
                or t.output_tokens[i] < 2
                or least.itl_s(t.prompt_tokens[i], t.output_tokens[i]) <= target.itl_s
            )
        )
        infeasible += not feasible
        if outcome == COMPLETED:
            completed += 1
            ttft = t.first_token_s[i] - t.arrival_s[i]
            ttfts.append(ttft)
            if meets_targets(ttft, t.tpot_s[i], target, t.prompt_tokens[i]):
                met += 1
                met_infeasible += not feasible
                met_tokens += t.output_tokens[i]
        elif outcome == REJECTED:
            rejected += 1
        elif outcome == INVALID:
            invalid += 1
        else:
            aborted += 1
    ttfts.sort()
    start = sim.gap_index_at_start
    gaps, counts = sim.flow.gaps_s[start:], sim.flow.gap_counts[start:]
    span = max(t.arrival_s[-1] - t.arrival_s[first], 1e-9)
    gpu_s = sim.gpu_s
    timeline = build_timeline(sim)
    itl50, itl90, itl99 = weighted_percentiles(gaps, counts, (0.5, 0.9, 0.99))
    peaks = dict.fromkeys(sim.fleet.pods, 0)
    for when, role, replicas, _ in sim.fleet.timeline:
        if when >= sim.options.measure_from_s:
            peaks[role] = max(peaks[role], replicas)
    for role in peaks:
        peaks[role] = max(peaks[role], timeline.replicas[role][0] if timeline.t_s else 0)
    return RunResult(
        policy=policy,
        requests=n,
        completed=completed,
        rejected=rejected,
        aborted=aborted,
        invalid=invalid,
        met=met,
        attainment=met / max(n - invalid, 1),
        infeasible=infeasible,
        attainment_feasible=(met - met_infeasible) / max(n - invalid - infeasible, 1),
        absorbed=sum(t.absorbed[first:]),
        goodput_rps=met / span,
        goodput_tokens_per_s=met_tokens / span,
        ttft_p50_s=percentile(ttfts, 0.5),
        ttft_p90_s=percentile(ttfts, 0.9),
        ttft_p99_s=percentile(ttfts, 0.99),
        itl_p50_s=itl50,
        itl_p90_s=itl90,
        itl_p99_s=itl99,
        gpu_hours=sum(gpu_s.values()) / 3600.0,
        gpu_hours_by_pool={role: s / 3600.0 for role, s in gpu_s.items()},
        peak_replicas=peaks,
        scale_changes=sum(
            1
            for tick in sim.ticks
            if tick.decision.changes and tick.now_s >= sim.options.measure_from_s
        ),
        end_s=sim.end_s - sim.options.measure_from_s,
        timeline=timeline,
    )


def build_timeline(sim: Simulation) -> Timeline:
    """Sample the run at its timeline points."""
    offset = sim.options.measure_from_s
    first = sim.options.first_measured
    points = [p for p in sim.timeline if p[0] >= offset]
    t_s = tuple(p[0] - offset for p in points)
    table = sim.table
    arrivals = sorted(table.arrival_s[first:])
    rates: list[float] = []
    prompt_rates: list[float] = []
    ttft_p90: list[float] = []
    itl_p90: list[float] = []
    by_first = sorted(
        (table.first_token_s[i], table.first_token_s[i] - table.arrival_s[i])
        for i in range(first, len(table))
        if table.outcome[i] == COMPLETED
    )
    first_times = [x[0] for x in by_first]
    prompt_prefix = [0]
    order = sorted(range(first, len(table)), key=lambda i: table.arrival_s[i])
    for i in order:
        prompt_prefix.append(prompt_prefix[-1] + table.prompt_tokens[i])
    gaps, counts = sim.flow.gaps_s, sim.flow.gap_counts
    for k, (t, _, gap_index) in enumerate(points):
        t0 = points[k - 1][0] if k else offset
        width = max(t - t0, 1e-9)
        a, b = bisect_left(arrivals, t0), bisect_left(arrivals, t)
        rates.append((b - a) / width if k else 0.0)
        prompt_rates.append((prompt_prefix[b] - prompt_prefix[a]) / width if k else 0.0)
        lo, hi = bisect_right(first_times, t0), bisect_right(first_times, t)
        window = sorted(x[1] for x in by_first[lo:hi])
        ttft_p90.append(percentile(window, 0.9))
        start = points[k - 1][2] if k else sim.gap_index_at_start
        itl_p90.append(
            weighted_percentiles(gaps[start:gap_index], counts[start:gap_index], (0.9,))[0]
        )
    replicas: dict[PoolRole, list[int]] = {role: [] for role in sim.fleet.pods}
    ready: dict[PoolRole, list[int]] = {role: [] for role in sim.fleet.pods}
    changes = sim.fleet.timeline
    current = {role: (0, 0) for role in sim.fleet.pods}
    j = 0
    for t in t_s:
        while j < len(changes) and changes[j][0] <= t + offset:
            _, role, n, r = changes[j]
            current[role] = (n, r)
            j += 1
        for role, (n, r) in current.items():
            replicas[role].append(n)
            ready[role].append(r)
    return Timeline(
        t_s=t_s,
        arrivals_per_s=tuple(rates),
        prompt_tokens_per_s=tuple(prompt_rates),
        replicas={r: tuple(v) for r, v in replicas.items()},
        ready={r: tuple(v) for r, v in ready.items()},
        ttft_p90_s=tuple(ttft_p90),
        itl_p90_s=tuple(itl_p90),
    )
