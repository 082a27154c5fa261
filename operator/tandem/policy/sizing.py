"""How many replicas each pool needs right now, before stabilization. Pure.

The ``slo`` policy sizes each pool from its own signals:

* **prefill** — demand is prompt tokens/s arriving, smoothed with a trend (Holt) and
  forecast one cold start ahead; capacity per replica is the declared profile, or
  learned online from the throughput the pool reached while it was saturated. Enough
  replicas are added to drain the waiting prompt tokens within half the TTFT budget,
  and the size is corrected by measured TTFT over its target.
* **decode** — replicas from KV demand (tokens in use plus tokens still to generate)
  over KV capacity × target usage, and from concurrency over the largest batch that
  keeps ITL within target, corrected by measured ITL over its target.

Worked example (decode): 4 replicas at 0.9 KV usage of 280k tokens each hold 1.01M
tokens; 600 running requests with 200 tokens still to generate add 0.12M; at a 0.8
target usage that is 1.13M / (0.8 × 280k) = 5.04 → 6 replicas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from tandem.observe.types import Observation, PoolObservation
from tandem.policy.config import (
    PRIOR_KV_TOKENS_PER_GPU,
    PRIOR_OUTPUT_TOKENS,
    PRIOR_PREFILL_TOKENS_PER_S_PER_GPU,
    PRIOR_PROMPT_TOKENS,
    LatencyTargets,
    PolicyConfig,
    PoolConfig,
)
from tandem.policy.fmt import human
from tandem.policy.state import PoolState

#: Holt smoothing factors for the demand level and its trend (per tick).
LEVEL_ALPHA = 0.5
TREND_BETA = 0.3
#: Weight of a new throughput sample in the learned capacity.
LEARN_RATE = 0.3
#: The most a latency correction multiplies the ready replicas by in one tick.
MAX_LATENCY_CORRECTION = 2.0


@dataclass(frozen=True)
class Sizing:
    """A pool's raw need: fractional replicas, the reason, the signals, new state."""

    replicas: float
    reason: str
    state: PoolState
    signals: dict[str, float] = field(default_factory=dict)
    panic: bool = False


def compute_holt(state: PoolState, demand: float, now_s: float) -> tuple[float, float]:
    """Smoothed (level, trend per second) of ``demand`` after this tick.

    >>> s = PoolState(demand_level=100.0, demand_trend_per_s=0.0, demand_time_s=0.0)
    >>> compute_holt(s, 200.0, 10.0)
    (150.0, 1.5)
    """
    if state.demand_level is None or state.demand_time_s is None:
        return demand, 0.0
    dt = max(now_s - state.demand_time_s, 1e-9)
    predicted = state.demand_level + state.demand_trend_per_s * dt
    level = LEVEL_ALPHA * demand + (1 - LEVEL_ALPHA) * predicted
    trend = (
        TREND_BETA * (level - state.demand_level) / dt + (1 - TREND_BETA) * state.demand_trend_per_s
    )
    return level, trend


def compute_latency_ratio(
    obs: Observation,
    pool: PoolObservation,
    targets: LatencyTargets,
    class_targets: dict[str, LatencyTargets],
    signal: str,
) -> tuple[float | None, float | None, float | None]:
    """(measured / target, measured s, target s) for ``signal`` (``ttft`` or ``itl``).

    The strictest class with traffic decides: the largest ratio over classes that had
    requests in the window. Router measurements are preferred; the pool's own engine
    histograms are the fallback.
    """
    best: tuple[float | None, float | None, float | None] = (None, None, None)
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
        ratio = measured / target
        if best[0] is None or ratio > best[0]:
            best = (ratio, measured, target)
    return best


def _latency_floor(pool: PoolObservation, ratio: float | None) -> float:
    """Replicas the measured latency asks for; pods still starting count as capacity
    on its way, so while any are starting the correction never asks for more."""
    if ratio is None or ratio <= 1.0 or pool.ready == 0 or pool.replicas > pool.ready:
        return 0.0
    return pool.ready * min(ratio, MAX_LATENCY_CORRECTION)


def size_prefill(
    obs: Observation,
    pool: PoolObservation,
    cfg: PoolConfig,
    config: PolicyConfig,
    state: PoolState,
) -> Sizing:
    """Prefill replicas needed for arriving prompt tokens, backlog and TTFT."""
    declared = cfg.prefill_tokens_per_s
    prior = PRIOR_PREFILL_TOKENS_PER_S_PER_GPU * cfg.gpus_per_replica
    per_request = (
        pool.prompt_tokens_per_s / pool.requests_finished_per_s
        if pool.requests_finished_per_s > 0
        else PRIOR_PROMPT_TOKENS
    )
    backlog_tokens = pool.waiting_requests * per_request
    processed = pool.prompt_tokens_per_s
    arrival = obs.arrival_prompt_tokens_per_s
    demand = arrival if arrival is not None else processed
    # A saturated pool (a queue at every ready pod) runs at its capacity: learn it.
    learned = state.learned_capacity
    if pool.ready > 0 and processed > 0:
        sample = processed / pool.ready
        if pool.waiting_requests >= pool.ready:
            learned = (
                sample if learned is None else (1 - LEARN_RATE) * learned + LEARN_RATE * sample
            )
        elif learned is not None and sample > learned:
            learned = sample  # it just did more than we thought it could
    capacity = declared or learned or prior
    level, trend = compute_holt(state, demand, obs.now_s)
    forecast = max(level + max(trend, 0.0) * config.cold_start_s, demand)
    budget_s = (config.targets.ttft_s or 1.0) * 0.5
    n_demand = forecast / (capacity * config.utilization)
    n_backlog = (demand + backlog_tokens / budget_s) / capacity
    ratio, measured, target = compute_latency_ratio(
        obs, pool, config.targets, dict(config.class_targets), "ttft"
    )
    n_latency = _latency_floor(pool, ratio)
    n = max(n_demand, n_backlog, n_latency)
    driver = max(
        (
            n_demand,
            f"prompt demand {human(forecast)} tok/s / ({config.utilization:g} × "
            f"{human(capacity)} tok/s per replica)",
        ),
        (
            n_backlog,
            f"backlog {human(backlog_tokens)} prompt tokens to drain in "
            f"{budget_s:g}s at {human(capacity)} tok/s per replica",
        ),
        (n_latency, f"TTFT {measured or 0:.3g}s over target {target or 0:.3g}s"),
    )[1]
    new_state = replace(
        state,
        demand_level=level,
        demand_trend_per_s=trend,
        demand_time_s=obs.now_s,
        learned_capacity=learned,
    )
    current_capacity = max(pool.ready, 1) * capacity
    return Sizing(
        replicas=n,
        reason=driver,
        state=new_state,
        signals={
            "demand": forecast,
            "capacity": capacity,
            "backlog_tokens": backlog_tokens,
            "utilization": demand / current_capacity,
            "latency_measured_s": measured or 0.0,
            "latency_target_s": target or 0.0,
        },
        panic=demand + backlog_tokens / budget_s > config.panic_threshold * current_capacity,
    )


def size_decode(
    obs: Observation,
    pool: PoolObservation,
    cfg: PoolConfig,
    config: PolicyConfig,
    state: PoolState,
) -> Sizing:
    """Decode replicas needed for KV demand, concurrency and ITL."""
    kv_cap = (
        cfg.kv_token_capacity
        or pool.kv_capacity_tokens
        or PRIOR_KV_TOKENS_PER_GPU * cfg.gpus_per_replica
    )
    answering = max(pool.scraped, 1)
    used = pool.kv_usage * kv_cap * answering
    out_len = (
        pool.generation_tokens_per_s / pool.requests_finished_per_s
        if pool.requests_finished_per_s > 0
        else PRIOR_OUTPUT_TOKENS
    )
    context = used / pool.running_requests if pool.running_requests >= 1 else PRIOR_PROMPT_TOKENS
    kv_demand = (
        used + pool.running_requests * out_len / 2 + pool.waiting_requests * (context + out_len / 2)
    )
    concurrency = pool.running_requests + pool.waiting_requests
    level, trend = compute_holt(state, concurrency, obs.now_s)
    forecast = max(level + max(trend, 0.0) * config.cold_start_s, concurrency)
    growth = forecast / concurrency if concurrency >= 1 else 1.0
    ratio, measured, target = compute_latency_ratio(
        obs, pool, config.targets, dict(config.class_targets), "itl"
    )
    batch = state.learned_batch
    per_replica = pool.running_requests / pool.ready if pool.ready else 0.0
    if ratio is not None and per_replica > 0:
        if ratio <= 1.0 and (batch is None or per_replica > batch):
            batch = per_replica  # this batch kept ITL within target
        elif ratio > 1.0 and batch is not None and per_replica < batch:
            batch = per_replica
    max_batch = min(cfg.max_batch_at_itl or batch or cfg.max_num_seqs, cfg.max_num_seqs)
    n_kv = kv_demand * growth / (kv_cap * config.kv_usage_target)
    n_conc = forecast / (max(max_batch, 1.0) * config.utilization)
    n_latency = _latency_floor(pool, ratio)
    n = max(n_kv, n_conc, n_latency)
    driver = max(
        (
            n_kv,
            f"KV demand {human(kv_demand * growth)} tokens / ({config.kv_usage_target:g} × "
            f"{human(kv_cap)} per replica)",
        ),
        (
            n_conc,
            f"{human(forecast)} sequences / ({config.utilization:g} × batch "
            f"{human(max_batch)} within ITL)",
        ),
        (n_latency, f"ITL {measured or 0:.3g}s over target {target or 0:.3g}s"),
    )[1]
    capacity_seqs = max(pool.ready, 1) * max_batch
    return Sizing(
        replicas=n,
        reason=driver,
        state=replace(
            state,
            demand_level=level,
            demand_trend_per_s=trend,
            demand_time_s=obs.now_s,
            learned_batch=batch,
        ),
        signals={
            "demand": forecast,
            "capacity": capacity_seqs,
            "kv_demand_tokens": kv_demand,
            "utilization": max(pool.kv_usage, concurrency / capacity_seqs),
            "latency_measured_s": measured or 0.0,
            "latency_target_s": target or 0.0,
        },
        panic=concurrency > config.panic_threshold * capacity_seqs
        or kv_demand > config.panic_threshold * max(pool.ready, 1) * kv_cap,
    )


def size_queue(pool: PoolObservation, config: PolicyConfig) -> Sizing:
    """The ``queue`` policy, as KEDA computes it: ``ceil(total / threshold per replica)``
    over waiting requests, and over KV usage for pools that decode."""
    n_wait = pool.waiting_requests / config.queue_waiting_per_replica
    n_kv = 0.0 if pool.role == "prefill" else pool.kv_usage * pool.scraped / config.queue_kv_usage
    n = max(n_wait, n_kv)
    reason = (
        f"{pool.waiting_requests:g} waiting / {config.queue_waiting_per_replica:g} per replica"
        if n_wait >= n_kv
        else f"KV usage {pool.kv_usage:.2f} × {pool.scraped} pods / {config.queue_kv_usage:g}"
    )
    return Sizing(
        replicas=n,
        reason=reason,
        state=PoolState(),
        signals={"demand": pool.waiting_requests, "utilization": pool.kv_usage},
    )


def ceil_replicas(n: float) -> int:
    """Replicas from a fractional need, ignoring float noise (``3.0000001 → 3``)."""
    if not math.isfinite(n):
        return 0 if math.isnan(n) or n < 0 else 1_000_000  # clamped to max by the caller
    return max(math.ceil(n - 1e-6), 0)
