"""How many replicas each pool needs right now, before stabilization. Pure.

The ``slo`` policy sizes each pool from its own signals, with what it learned about a
replica live (:mod:`tandem.policy.learn`; no profiling run):

* **prefill** — demand is prompt tokens/s arriving (what the pool processed plus how
  fast its backlog grew, plus prompts decode engines absorbed), smoothed, with a slow
  trend carried one cold start ahead; capacity per replica is
  ``profile.prefillTokensPerS`` or learned from the pool's service time and saturation.
  Replicas = demand / (capacity × utilization), enough to drain the waiting prompts
  within a tick, and more when the requests that can meet their TTFT target spent more
  than their queueing budget waiting (:mod:`tandem.policy.feasibility`): the latency
  rule scales on delay more replicas remove, never on a prompt's own prefill time, and
  requests no pool size could serve in time are left out of it.
* **decode** — one replica generates ``batch`` tokens per step, where ``batch`` is the
  largest that keeps ITL within target (``profile.maxBatchAtItl`` or learned from a
  line fitted through (batch, ITL) of past windows), so replicas = output tokens/s ×
  ITL target / batch (over the batch share the objective plans). Output tokens/s is
  what the pool generated, or, while requests wait for room in it, what the prefill
  pool hands it (requests finished × mean output length), which a saturated pool's own
  rate understates on a ramp. Also KV demand over KV
  capacity × target usage, every queued sequence's slot, and more when measured ITL is
  over target (unless the router found the target below the least ITL it has seen).

Worked example (decode): 4 replicas at 0.9 KV usage of 280k tokens each hold 1.01M
tokens; 600 running requests with 200 tokens still to generate add 0.12M; at a 0.8
target usage that is 1.13M / (0.8 × 280k) = 5.04 → 6 replicas. And by rate: 9,000
output tokens/s at a 50 ms ITL target with batch 180 (mean step 41.7 ms at a p90/mean
of 1.2) is 9,000 / (0.9 × 180 × 1.2 / 0.05) = 2.3 → 3 replicas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from tandem.observe.types import Observation, PoolObservation
from tandem.policy.config import (
    PRIOR_KV_TOKENS_PER_GPU,
    PRIOR_OUTPUT_TOKENS,
    PRIOR_PREFILL_TOKENS_PER_S_PER_GPU,
    PRIOR_PROMPT_TOKENS,
    PolicyConfig,
    PoolConfig,
)
from tandem.policy.fmt import human
from tandem.policy.latency import (
    LatencyRatio,
    compute_infeasible_per_s,
    compute_latency_floor,
    compute_latency_ratio,
    format_latency_reason,
)
from tandem.policy.learn import (
    StepFit,
    compute_batch_at_itl,
    compute_window_batch,
    learn_prefill_capacity,
    learn_step_fit,
)
from tandem.policy.state import PoolState
from tandem.policy.types import Driver

#: Holt smoothing factors for the demand level and its trend (per tick).
LEVEL_ALPHA = 0.5
TREND_BETA = 0.02


@dataclass(frozen=True)
class Sizing:
    """A pool's raw need: fractional replicas, the reason, the signals, new state."""

    replicas: float
    reason: str
    state: PoolState
    driver: Driver | Literal[""] = ""
    """What set the size (a :data:`~tandem.policy.types.DRIVERS` code)."""
    signals: dict[str, float] = field(default_factory=dict)
    panic: bool = False


def compute_holt(state: PoolState, demand: float, now_s: float) -> tuple[float, float]:
    """Smoothed (level, trend per second) of ``demand`` after this tick.

    >>> s = PoolState(demand_level=100.0, demand_trend_per_s=0.0, demand_time_s=0.0)
    >>> compute_holt(s, 200.0, 10.0)
    (150.0, 0.1)
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


def compute_forecast(level: float, trend: float, config: PolicyConfig) -> float:
    """Demand to plan for: the smoothed level carried one cold start along a rising
    trend (what pods started now will face when they are ready).

    Not the raw demand of the last window: the scale-down window keeps the highest
    recommendation of its ticks, so one noisy window would hold the pool up for the
    whole window. The trend is smoothed slowly (:data:`TREND_BETA`), so only a
    sustained ramp moves it: measured over 15 s windows, a fast trend is mostly noise,
    and two minutes of that noise doubled the pools. A sudden surge shows at once in
    the backlog and latency terms instead.
    """
    return max(level + max(trend, 0.0) * config.cold_start_s, 0.0)


def compute_prompt_demand(
    obs: Observation, pool: PoolObservation, backlog_tokens: float, state: PoolState
) -> float:
    """Prompt tokens/s arriving: the router's count when it reports one, else what the
    pool processed plus how fast its backlog grew since the last tick (a saturated pool
    processes only its capacity; the rest of the demand piles up in the queue), plus what
    decode engines absorbed (prompts the router sent them whole while the prefill pool's
    wait was too long: work the pool must be sized for all the same).

    >>> pool = PoolObservation("prefill", 1, 1, 1, prompt_tokens_per_s=30_000.0)
    >>> state = PoolState(backlog_tokens=100_000.0)
    >>> obs = Observation(now_s=15.0, window_s=15.0, pools={})
    >>> compute_prompt_demand(obs, pool, 400_000.0, state)
    50000.0
    """
    if obs.arrival_prompt_tokens_per_s is not None:
        return obs.arrival_prompt_tokens_per_s
    growth = 0.0
    if state.backlog_tokens is not None and obs.window_s > 0:
        growth = max(backlog_tokens - state.backlog_tokens, 0.0) / obs.window_s
    absorbed = obs.absorbed_prompt_tokens_per_s if pool.role == "prefill" else 0.0
    return pool.prompt_tokens_per_s + growth + absorbed


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
    demand = compute_prompt_demand(obs, pool, backlog_tokens, state)
    measured_prompt = per_request if pool.requests_finished_per_s > 0 else 0.0
    learned = learn_prefill_capacity(state.learned_capacity, pool, measured_prompt, obs.window_s)
    capacity = declared or learned or prior
    level, trend = compute_holt(state, demand, obs.now_s)
    forecast = compute_forecast(level, trend, config)
    # Waiting prompts are drained within a tick (or the TTFT budget, if longer): sooner
    # would ask for pods that could not be ready before the queue is gone anyway.
    budget_s = max((config.targets.ttft_s or 1.0) * 0.5, config.interval_s)
    utilization = config.utilization
    n_demand = forecast / (capacity * utilization)
    n_backlog = (demand + backlog_tokens / budget_s) / capacity
    latency = compute_latency_ratio(obs, pool, config.targets, dict(config.class_targets), "ttft")
    n_latency = compute_latency_floor(pool, latency.ratio)
    n = max(n_demand, n_backlog, n_latency)
    options: list[tuple[float, Driver, str]] = [
        (
            n_demand,
            "demand",
            f"prompt demand {human(forecast)} tok/s / ({utilization:.2g} × "
            f"{human(capacity)} tok/s per replica)",
        ),
        (
            n_backlog,
            "backlog",
            f"backlog {human(backlog_tokens)} prompt tokens to drain in "
            f"{budget_s:g}s at {human(capacity)} tok/s per replica",
        ),
        (n_latency, "latency", format_latency_reason("ttft", latency)),
    ]
    # The first listed wins a tie: with no load at all, demand (0) says so, not latency.
    _, driver, reason = max(options, key=lambda option: option[0])
    new_state = replace(
        state,
        demand_level=level,
        demand_trend_per_s=trend,
        demand_time_s=obs.now_s,
        learned_capacity=learned,
        backlog_tokens=backlog_tokens,
    )
    current_capacity = max(pool.ready, 1) * capacity
    return Sizing(
        replicas=n,
        reason=reason,
        driver=driver,
        state=new_state,
        signals={
            "demand": forecast,
            "capacity": capacity,
            "backlog_tokens": backlog_tokens,
            "utilization": demand / current_capacity,
            "latency_measured_s": latency.measured_s or 0.0,
            "latency_target_s": latency.target_s or 0.0,
            "queueing_ratio": latency.ratio if latency.queueing and latency.ratio else 0.0,
            "absorbed_prompt_tokens_per_s": obs.absorbed_prompt_tokens_per_s,
            "infeasible_per_s": compute_infeasible_per_s(obs, "ttft"),
        },
        panic=demand + backlog_tokens / budget_s > config.panic_threshold * current_capacity,
    )


def compute_decode_demand(obs: Observation, pool: PoolObservation, out_len: float) -> float:
    """Output tokens/s the decode pool must generate: what it generated, or, while some of
    its requests wait for room (``waiting_for_capacity``), what arrives: the requests the
    prefill pool finished plus those decode engines absorbed, each at the mean output
    length. A saturated pool generates only its capacity, so on a ramp its own rate lags
    the work handed to it. Waiting alone is no sign of that in P/D: a decode engine's
    waiting count includes the requests pulling their KV, so engines that do not split
    the count by reason (vLLM before 0.32) are sized on what they generated.

    >>> prefill = PoolObservation("prefill", 2, 2, 2, requests_finished_per_s=10.0)
    >>> decode = PoolObservation("decode", 1, 1, 1, generation_tokens_per_s=800.0,
    ...                          waiting_requests=5.0, waiting_for_capacity=3.0)
    >>> obs = Observation(now_s=15.0, window_s=15.0, pools={"prefill": prefill})
    >>> compute_decode_demand(obs, decode, out_len=200.0)
    2000.0
    >>> compute_decode_demand(obs, replace(decode, waiting_for_capacity=0.0), 200.0)
    800.0
    """
    generated = pool.generation_tokens_per_s
    prefill = obs.pools.get("prefill")
    if pool.role != "decode" or prefill is None or (pool.waiting_for_capacity or 0.0) < 1:
        return generated
    arriving = (prefill.requests_finished_per_s + obs.absorbed_requests_per_s) * out_len
    return max(generated, arriving)


def size_decode(
    obs: Observation,
    pool: PoolObservation,
    cfg: PoolConfig,
    config: PolicyConfig,
    state: PoolState,
) -> Sizing:
    """Decode replicas needed for the output rate at the ITL target, KV demand, queued
    sequences and measured ITL."""
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
    seen_context = used / pool.running_requests if pool.running_requests >= 1 else 0.0
    context = seen_context if pool.running_requests >= 1 else PRIOR_PROMPT_TOKENS
    # Requests pulling their KV already hold its blocks and a place in the engine; only
    # those waiting for capacity still need room (all the waiting, where engines do not
    # say which).
    queued = (
        pool.waiting_for_capacity
        if pool.waiting_for_capacity is not None
        else pool.waiting_requests
    )
    kv_demand = used + pool.running_requests * out_len / 2 + queued * (context + out_len / 2)
    concurrency = pool.running_requests + pool.waiting_requests
    ratio, measured, target, mean, _ = compute_latency_ratio(
        obs, pool, config.targets, dict(config.class_targets), "itl"
    )
    itl_s = target or config.targets.itl_s
    batch_now = compute_window_batch(pool, mean)
    fit = learn_step_fit(
        StepFit.from_list(state.step_fit), batch_now, mean, measured, obs.window_s, seen_context
    )
    batch, proven = (
        compute_batch_at_itl(
            fit, state.proven_batch, itl_s, batch_now, ratio, obs.window_s, seen_context
        )
        if itl_s
        else (None, None)
    )
    batch = batch or state.learned_batch
    max_batch = max(min(cfg.max_batch_at_itl or batch or cfg.max_num_seqs, cfg.max_num_seqs), 1.0)
    utilization = config.batch_share
    demand = compute_decode_demand(obs, pool, out_len)
    arriving = demand > pool.generation_tokens_per_s
    level, trend = compute_holt(state, demand, obs.now_s)
    forecast = compute_forecast(level, trend, config)
    # A rising trend scales the snapshot signals (KV in use, sequences) too; a level still
    # below a sudden jump never shrinks them.
    growth = max(forecast / demand, 1.0) if demand > 0 else 1.0
    rate_driver: Driver = "rate" if itl_s else "concurrency"
    if itl_s:
        # A replica at max_batch generates max_batch tokens per step, and its mean
        # step is the target over the tail (the target's percentile over the mean).
        per_replica = max_batch * fit.tail_ratio / itl_s
        n_rate = forecast / (per_replica * utilization)
        rate_reason = (
            f"{human(forecast)} tok/s{' arriving from prefill' if arriving else ''} / "
            f"({utilization:.2g} × {human(per_replica)} tok/s "
            f"per replica at batch {human(max_batch)} within ITL {itl_s:g}s)"
        )
    else:
        n_rate = concurrency * growth / (max_batch * utilization)
        rate_reason = (
            f"{human(concurrency * growth)} sequences / ({utilization:.2g} × batch "
            f"{human(max_batch)})"
        )
    n_kv = kv_demand * growth / (kv_cap * config.kv_usage_target)
    # Queued sequences need a slot now, whatever the rate says.
    n_queue = concurrency / max_batch if queued >= 1 else 0.0
    n_latency = compute_latency_floor(pool, ratio)
    n = max(n_kv, n_rate, n_queue, n_latency)
    options: list[tuple[float, Driver, str]] = [
        (
            n_kv,
            "kv",
            f"KV demand {human(kv_demand * growth)} tokens / ({config.kv_usage_target:g} × "
            f"{human(kv_cap)} per replica)",
        ),
        (n_rate, rate_driver, rate_reason),
        (
            n_queue,
            "queue",
            f"{human(concurrency)} sequences ({human(queued)} waiting"
            f"{' for capacity' if pool.waiting_for_capacity is not None else ''}) / batch "
            f"{human(max_batch)} within ITL",
        ),
        (
            n_latency,
            "latency",
            format_latency_reason("itl", LatencyRatio(ratio, measured, target, mean)),
        ),
    ]
    # The first listed wins a tie: with no load at all, demand (0) says so, not latency.
    _, driver, reason = max(options, key=lambda option: option[0])
    capacity_seqs = max(pool.ready, 1) * max_batch
    return Sizing(
        replicas=n,
        reason=reason,
        driver=driver,
        state=replace(
            state,
            demand_level=level,
            demand_trend_per_s=trend,
            demand_time_s=obs.now_s,
            learned_batch=batch,
            proven_batch=proven,
            step_fit=tuple(fit.to_list()) if fit.weight > 0 else None,
        ),
        signals={
            "demand": forecast,
            "capacity": capacity_seqs,
            "kv_demand_tokens": kv_demand,
            "utilization": max(pool.kv_usage, concurrency / capacity_seqs),
            "latency_measured_s": measured or 0.0,
            "latency_target_s": target or 0.0,
            "infeasible_per_s": compute_infeasible_per_s(obs, "itl"),
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
        driver="queue" if n_wait >= n_kv else "kv",
        state=PoolState(),
        signals={"demand": pool.waiting_requests, "utilization": pool.kv_usage},
    )


def ceil_replicas(n: float) -> int:
    """Replicas from a fractional need, ignoring float noise (``3.0000001 → 3``)."""
    if not math.isfinite(n):
        return 0 if math.isnan(n) or n < 0 else 1_000_000  # clamped to max by the caller
    return max(math.ceil(n - 1e-6), 0)
