"""The latency signal each pool is sized on, and the replicas it asks for. Pure.

Router measurements per priority class are preferred, the pool's own engine histograms
the fallback; the strictest class with traffic decides. For TTFT, a router that judges
feasibility (:mod:`tandem.policy.feasibility`) gives the queueing ratio of the requests
that can meet their target, so the prefill pool grows only for delay more replicas
remove; requests no pool size could serve in time, for TTFT or ITL, give no signal.
"""

from __future__ import annotations

from typing import NamedTuple

from tandem.observe.types import Observation, PoolObservation
from tandem.policy.config import LatencyTargets

#: The most a latency correction multiplies the ready replicas by in one tick.
MAX_LATENCY_CORRECTION = 2.0


class LatencyRatio(NamedTuple):
    """The latency signal a pool is sized on, from its strictest class."""

    ratio: float | None
    """Measured over target (1: exactly on target); ``None`` without a signal."""
    measured_s: float | None
    """The measured latency at the target's percentile."""
    target_s: float | None
    mean_s: float | None
    """The window's mean latency."""
    queueing: bool = False
    """``ratio`` is the TTFT queueing ratio of feasible requests (:mod:`tandem.policy.feasibility`)
    rather than TTFT over target."""


def compute_latency_ratio(
    obs: Observation,
    pool: PoolObservation,
    targets: LatencyTargets,
    class_targets: dict[str, LatencyTargets],
    signal: str,
) -> LatencyRatio:
    """The latency signal for ``signal`` (``ttft`` or ``itl``): measured / target at the
    target's percentile, with the measured value and the window's mean.

    The strictest class with traffic decides: the largest ratio over classes that had
    requests in the window. Router measurements are preferred; the pool's own engine
    histograms are the fallback. Requests no pool size could serve in time are left out:
    for TTFT, a router that judges feasibility gives the queueing ratio of the feasible
    requests (the share of their queueing budget they used: only delay more replicas
    remove; :mod:`tandem.policy.feasibility`), and a class none of whose requests was
    feasible has no signal; for ITL, a class whose requests the router found beyond the
    least ITL it has seen has none either.
    """
    best = LatencyRatio(None, None, None, None)
    sources = [(name, lat) for name, lat in obs.latency_by_class.items() if lat.requests > 0]
    if not sources and pool.latency is not None:
        sources = [("", pool.latency)]
    for name, latency in sources:
        t = class_targets.get(name, targets)
        target = t.ttft_s if signal == "ttft" else t.itl_s
        pct = t.ttft_percentile if signal == "ttft" else t.itl_percentile
        values = latency.ttft_s if signal == "ttft" else latency.itl_s
        measured = values.get(pct)
        if target is None or target <= 0 or measured is None:
            continue
        mean = latency.ttft_mean_s if signal == "ttft" else latency.itl_mean_s
        queueing = signal == "ttft" and latency.feasible_requests is not None
        if queueing:
            ratio = latency.queueing_ratio.get(pct)
            if not latency.feasible_requests or ratio is None:
                continue
        elif signal == "itl" and latency.infeasible_requests.get("itl", 0.0) > 0:
            continue
        else:
            ratio = measured / target
        if best.ratio is None or ratio > best.ratio:
            best = LatencyRatio(ratio, measured, target, mean, queueing)
    return best


def compute_latency_floor(pool: PoolObservation, ratio: float | None) -> float:
    """Replicas the measured latency asks for; pods still starting count as capacity
    on its way, so while any are starting the correction never asks for more."""
    if ratio is None or ratio <= 1.0 or pool.ready == 0 or pool.replicas > pool.ready:
        return 0.0
    return pool.ready * min(ratio, MAX_LATENCY_CORRECTION)


def format_latency_reason(signal: str, latency: LatencyRatio) -> str:
    if latency.queueing:
        return (
            f"TTFT queueing at {latency.ratio or 0:.3g}x the budget of requests that can "
            f"meet their target (TTFT {latency.measured_s or 0:.3g}s, target "
            f"{latency.target_s or 0:.3g}s)"
        )
    name = "TTFT" if signal == "ttft" else "ITL"
    return f"{name} {latency.measured_s or 0:.3g}s over target {latency.target_s or 0:.3g}s"


def compute_infeasible_per_s(obs: Observation, reason: str) -> float:
    """Requests/s of the window the router found no pool size could serve within target
    for ``reason`` (``ttft``: the prefill pool's signal; ``itl``: the decode pool's)."""
    if obs.window_s <= 0:
        return 0.0
    total = sum(lat.infeasible_requests.get(reason, 0.0) for lat in obs.latency_by_class.values())
    return total / obs.window_s
