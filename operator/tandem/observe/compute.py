"""Per-pod samples of two scrapes → one :class:`Observation`. Pure.

Each pod contributes its latest sample to the gauges and, when an earlier sample of
the same pod exists, its counter increases and histogram deltas to the rates and
percentiles. Rates use the pod's own two sample times, so a pod that missed a tick
still gives a correct average. A counter that went down means the process restarted:
its current value is what arrived since (as PromQL's ``rate`` assumes).

Router latency per priority class is preferred (with the feasibility accounting: the
TTFT queueing ratio of requests that could meet their target, and the count of those
that could not); when no router pod reports any class,
``latency_by_class["default"]`` falls back to the engines: TTFT of the prefill pool
(without the KV handoff, so a lower bound of what users see) and ITL of the decode
pool; in aggregated mode both from the one pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tandem.api.vocab import PoolRole
from tandem.observe.histogram import (
    DEFAULT_PERCENTILES,
    Histogram,
    compute_histogram_delta,
    compute_mean,
    compute_percentiles,
    merge_histograms,
)
from tandem.observe.parse import (
    ENGINE_KV_USAGE,
    ENGINE_RUNNING,
    ENGINE_WAITING,
    ClassSample,
    EngineSample,
    RouterSample,
)
from tandem.observe.types import (
    LatencyObservation,
    Observation,
    PodObservation,
    PoolObservation,
    sum_known,
)

S = TypeVar("S", EngineSample, RouterSample)
DEFAULT_CLASS = "default"


@dataclass(frozen=True)
class PodScrape(Generic[S]):
    """What is known of one pod at a tick: its latest and previous samples or an error."""

    current: S | None = None
    previous: S | None = None
    """The last sample before ``current`` (possibly from an older tick)."""
    error: str | None = None
    """Why ``current`` is missing (timeout, HTTP status, unreadable page)."""


@dataclass(frozen=True)
class PoolScrape:
    """One pool's pods at a tick, with the Deployment's replica counts."""

    replicas: int
    ready: int
    pods: Mapping[str, PodScrape[EngineSample]] = field(default_factory=dict)


def compute_increase(previous: float | None, current: float | None) -> float | None:
    """How much a counter grew; after a restart (a decrease) the current value.

    >>> compute_increase(10.0, 15.0), compute_increase(10.0, 4.0), compute_increase(None, 4.0)
    (5.0, 4.0, None)
    """
    if previous is None or current is None:
        return None
    return current - previous if current >= previous else current


def compute_rate(previous: float | None, current: float | None, elapsed_s: float) -> float | None:
    """Per-second increase of a counter over ``elapsed_s``; never negative."""
    increase = compute_increase(previous, current)
    if increase is None or elapsed_s <= 0:
        return None
    return increase / elapsed_s


def compute_observation(
    now_s: float,
    window_s: float,
    pools: Mapping[PoolRole, PoolScrape],
    routers: Mapping[str, PodScrape[RouterSample]] | None = None,
    *,
    percentiles: Iterable[int] = DEFAULT_PERCENTILES,
    errors: Iterable[str] = (),
) -> Observation:
    """The observation of one tick from every pod's samples."""
    wanted = tuple(percentiles)
    pool_obs = {role: compute_pool(role, pool, wanted) for role, pool in pools.items()}
    router_errors = [
        f"router pod {pod}: {scrape.error or 'not scraped'}"
        for pod, scrape in sorted((routers or {}).items())
        if scrape.current is None
    ]
    latency = compute_router_latency(routers or {}, wanted)
    if not any(s.current is not None and s.current.classes for s in (routers or {}).values()):
        latency = compute_engine_fallback(pool_obs)
    absorbed, absorbed_tokens = compute_absorbed(routers or {})
    return Observation(
        now_s=now_s,
        window_s=window_s,
        pools=pool_obs,
        latency_by_class=latency,
        errors=(*errors, *router_errors),
        absorbed_requests_per_s=absorbed,
        absorbed_prompt_tokens_per_s=absorbed_tokens,
    )


def compute_absorbed(routers: Mapping[str, PodScrape[RouterSample]]) -> tuple[float, float]:
    """(requests/s, prompt tokens/s) decode engines prefilled instead of the prefill pool,
    summed over router pods with two samples."""
    requests = tokens = 0.0
    for scrape in routers.values():
        cur, prev = scrape.current, scrape.previous
        if cur is None or prev is None or cur.at_s <= prev.at_s:
            continue
        elapsed_s = cur.at_s - prev.at_s
        for cls, now in cur.classes.items():
            before = prev.classes.get(cls, ClassSample())
            requests += (
                compute_rate(before.absorbed_requests, now.absorbed_requests, elapsed_s) or 0
            )
            tokens += (
                compute_rate(before.absorbed_prompt_tokens, now.absorbed_prompt_tokens, elapsed_s)
                or 0.0
            )
    return requests, tokens


def compute_pool(
    role: PoolRole, pool: PoolScrape, percentiles: Iterable[int] = DEFAULT_PERCENTILES
) -> PoolObservation:
    """Sums, means and rates over the pods of one pool that answered."""
    failed: dict[str, str] = {}
    pods: dict[str, PodObservation] = {}
    capacities: list[float] = []
    for_capacity: list[float | None] = []
    rates = [0.0, 0.0, 0.0, 0.0]
    rated: list[PodScrape[EngineSample]] = []
    for name, scrape in sorted(pool.pods.items()):
        cur = scrape.current
        if cur is None:
            failed[name] = scrape.error or "not scraped"
            continue
        if cur.waiting_requests is None or cur.running_requests is None or cur.kv_usage is None:
            missing = [
                metric
                for metric, value in (
                    (ENGINE_WAITING, cur.waiting_requests),
                    (ENGINE_RUNNING, cur.running_requests),
                    (ENGINE_KV_USAGE, cur.kv_usage),
                )
                if value is None
            ]
            failed[name] = f"metrics page lacks {', '.join(missing)}"
            continue
        pods[name] = PodObservation(cur.waiting_requests, cur.running_requests, cur.kv_usage)
        for_capacity.append(cur.waiting_for_capacity)
        if cur.kv_capacity_tokens is not None:
            capacities.append(cur.kv_capacity_tokens)
        prev = scrape.previous
        if prev is None or cur.at_s <= prev.at_s:
            continue
        rated.append(scrape)
        elapsed_s = cur.at_s - prev.at_s
        pairs = (
            (prev.prompt_tokens, cur.prompt_tokens),
            (prev.generation_tokens, cur.generation_tokens),
            (prev.preemptions, cur.preemptions),
            (prev.requests_finished, cur.requests_finished),
        )
        for i, (before, after) in enumerate(pairs):
            rates[i] += compute_rate(before, after, elapsed_s) or 0.0
    kv = [p.kv_usage for p in pods.values()]
    return PoolObservation(
        role=role,
        replicas=pool.replicas,
        ready=pool.ready,
        scraped=len(pods),
        failed=failed,
        waiting_requests=sum(p.waiting_requests for p in pods.values()),
        waiting_for_capacity=sum_known(for_capacity),
        running_requests=sum(p.running_requests for p in pods.values()),
        kv_usage=sum(kv) / len(kv) if kv else 0.0,
        kv_usage_max=max(kv, default=0.0),
        kv_capacity_tokens=sum(capacities) / len(capacities) if capacities else None,
        prompt_tokens_per_s=rates[0],
        generation_tokens_per_s=rates[1],
        preemptions_per_s=rates[2],
        requests_finished_per_s=rates[3],
        latency=_engine_latency(rated, tuple(percentiles)) if rated else None,
        rated=len(rated),
        pods=pods,
    )


def compute_router_latency(
    routers: Mapping[str, PodScrape[RouterSample]],
    percentiles: Iterable[int] = DEFAULT_PERCENTILES,
) -> dict[str, LatencyObservation]:
    """Latency and request rates per priority class, summed over router pods that have
    two samples. A class missing from a pod's previous sample started in between."""
    wanted = tuple(percentiles)
    ttft: dict[str, list[Histogram]] = {}
    itl: dict[str, list[Histogram]] = {}
    queueing: dict[str, list[Histogram]] = {}
    infeasible: dict[str, dict[str, float]] = {}
    requests: dict[str, list[float]] = {}
    for scrape in routers.values():
        cur, prev = scrape.current, scrape.previous
        if cur is None or prev is None or cur.at_s <= prev.at_s:
            continue
        elapsed_s = cur.at_s - prev.at_s
        for cls, now in cur.classes.items():
            before = prev.classes.get(cls, ClassSample())
            if now.ttft is not None:
                ttft.setdefault(cls, []).append(compute_histogram_delta(before.ttft, now.ttft))
            if now.itl is not None:
                itl.setdefault(cls, []).append(compute_histogram_delta(before.itl, now.itl))
            if now.queueing is not None:
                delta = compute_histogram_delta(before.queueing, now.queueing)
                queueing.setdefault(cls, []).append(delta)
            reasons = infeasible.setdefault(cls, {})
            for reason, count in now.infeasible_by_reason.items():
                grew = compute_increase(before.infeasible_by_reason.get(reason, 0.0), count)
                reasons[reason] = reasons.get(reason, 0.0) + (grew or 0.0)
            totals = requests.setdefault(cls, [0.0, 0.0])
            for code, count in now.requests_by_code.items():
                rate = compute_rate(before.requests_by_code.get(code, 0.0), count, elapsed_s)
                totals[0] += rate or 0.0
                totals[1] += (rate or 0.0) if code.startswith("5") else 0.0
    out: dict[str, LatencyObservation] = {}
    for cls in sorted(set(ttft) | set(itl) | set(requests)):
        ttft_hist = merge_histograms(ttft.get(cls, ()))
        total, errors = requests.get(cls, [0.0, 0.0])
        itl_hist = merge_histograms(itl.get(cls, ()))
        queueing_hist = merge_histograms(queueing.get(cls, ()))
        out[cls] = LatencyObservation(
            ttft_s=compute_percentiles(ttft_hist, wanted),
            itl_s=compute_percentiles(itl_hist, wanted),
            requests=ttft_hist.count if ttft_hist is not None else 0.0,
            ttft_mean_s=compute_mean(ttft_hist),
            itl_mean_s=compute_mean(itl_hist),
            source="router",
            requests_per_s=total,
            error_requests_per_s=errors,
            queueing_ratio=compute_percentiles(queueing_hist, wanted),
            feasible_requests=queueing_hist.count if queueing_hist is not None else None,
            infeasible_requests={r: n for r, n in infeasible.get(cls, {}).items() if n > 0},
        )
    return out


def _engine_latency(
    rated: Iterable[PodScrape[EngineSample]], percentiles: tuple[int, ...]
) -> LatencyObservation:
    ttft: list[Histogram] = []
    itl: list[Histogram] = []
    for scrape in rated:
        cur, prev = scrape.current, scrape.previous
        assert cur is not None and prev is not None
        if cur.ttft is not None:
            ttft.append(compute_histogram_delta(prev.ttft, cur.ttft))
        if cur.itl is not None:
            itl.append(compute_histogram_delta(prev.itl, cur.itl))
    ttft_hist, itl_hist = merge_histograms(ttft), merge_histograms(itl)
    return LatencyObservation(
        ttft_s=compute_percentiles(ttft_hist, percentiles),
        itl_s=compute_percentiles(itl_hist, percentiles),
        requests=ttft_hist.count if ttft_hist is not None else 0.0,
        source="engine",
        ttft_mean_s=compute_mean(ttft_hist),
        itl_mean_s=compute_mean(itl_hist),
    )


def compute_engine_fallback(
    pools: Mapping[PoolRole, PoolObservation],
) -> dict[str, LatencyObservation]:
    """``{"default": ...}`` from the engines' latency, for a service without router data."""
    first = pools.get("prefill", pools.get("pool"))
    tokens = pools.get("decode", pools.get("pool"))
    first_latency = first.latency if first is not None else None
    tokens_latency = tokens.latency if tokens is not None else None
    if first_latency is None and tokens_latency is None:
        return {}
    return {
        DEFAULT_CLASS: LatencyObservation(
            ttft_s=first_latency.ttft_s if first_latency else {},
            itl_s=tokens_latency.itl_s if tokens_latency else {},
            requests=first_latency.requests if first_latency else 0.0,
            source="engine",
            ttft_mean_s=first_latency.ttft_mean_s if first_latency else None,
            itl_mean_s=tokens_latency.itl_mean_s if tokens_latency else None,
        )
    }
