"""``decide(state, observation, config) -> (state, decision)``: the autoscaler. Pure.

The operator's timer, the local fleet (``tandem up``) and the fleet simulator all call
this one function; nothing here knows which of them is driving.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Literal

from tandem.api.vocab import PoolRole
from tandem.observe.types import Observation, PoolObservation
from tandem.policy.config import PolicyConfig, PoolConfig
from tandem.policy.sizing import Sizing, ceil_replicas, size_decode, size_prefill, size_queue
from tandem.policy.stabilize import remember_peak, stabilize
from tandem.policy.state import PolicyState, PoolState, RequestTally
from tandem.policy.types import Cause, Decision, PoolDecision


def decide(
    state: PolicyState, obs: Observation, config: PolicyConfig
) -> tuple[PolicyState, Decision]:
    """Every pool's size for this tick, with its reason, and the state to keep."""
    decisions: dict[PoolRole, PoolDecision] = {}
    for role, cfg in config.pools.items():
        pool_obs = obs.pools.get(role)
        pool_state = state.pool(role)
        if pool_obs is None:
            decisions[role] = _hold(role, cfg.initial_replicas, "no observation of the pool")
            continue
        current = pool_obs.replicas
        if config.policy == "static":
            decisions[role] = _hold(role, current, f"{role} {current}: static policy", "static")
            continue
        bad = _non_finite(pool_obs)
        if bad:
            decisions[role] = _hold(
                role, current, f"{role} {current}: holding, metrics unavailable ({bad})"
            )
            continue
        if pool_obs.replicas == 0 or not pool_obs.available:
            decisions[role] = _from_zero_or_hold(obs, pool_obs, cfg)
            continue
        sizing = _size(obs, pool_obs, cfg, config, pool_state)
        wanted = ceil_replicas(sizing.replicas)
        sized = sizing.state
        memo, driver = "", sizing.driver
        if config.policy == "slo":
            wanted, sized, memo = remember_peak(wanted, obs.now_s, sized, cfg, config)
            driver = "burst" if memo else driver
        desired, new_state, note, cause = stabilize(
            current, wanted, sizing.panic, obs.now_s, sized, cfg, config
        )
        note = "; ".join(n for n in (memo, note) if n)
        if desired != current:
            new_state = replace(new_state, last_scale_s=obs.now_s)
        if config.policy == "queue":  # the queue policy learns nothing
            new_state = replace(new_state, demand_level=None, learned_capacity=None)
        state = state.with_pool(role, new_state)
        reason = f"{role} {current}→{desired}: {sizing.reason}" + (f" ({note})" if note else "")
        decisions[role] = PoolDecision(
            role, current, desired, reason, sizing.signals, driver=driver, cause=cause
        )
    decisions = _apply_ratio(decisions, config)
    state = replace(state, requests=compute_request_tally(obs))
    return state, Decision(now_s=obs.now_s, pools=decisions)


def compute_request_tally(obs: Observation) -> RequestTally:
    """The window's requests as the router counted them, per second.

    >>> from tandem.observe.types import LatencyObservation
    >>> lat = LatencyObservation(requests=30.0, infeasible_requests={"ttft": 3.0})
    >>> obs = Observation(now_s=15.0, window_s=15.0, pools={}, latency_by_class={"a": lat})
    >>> compute_request_tally(obs).infeasible_per_s
    {'ttft': 0.2}
    """
    if obs.window_s <= 0:
        return RequestTally()
    infeasible: dict[str, float] = {}
    for latency in obs.latency_by_class.values():
        for reason, count in latency.infeasible_requests.items():
            infeasible[reason] = infeasible.get(reason, 0.0) + count / obs.window_s
    return RequestTally(
        window_s=obs.window_s,
        per_s=sum(lat.requests for lat in obs.latency_by_class.values()) / obs.window_s,
        infeasible_per_s=infeasible,
        absorbed_per_s=obs.absorbed_requests_per_s,
        absorbed_prompt_tokens_per_s=obs.absorbed_prompt_tokens_per_s,
    )


def _size(
    obs: Observation,
    pool: PoolObservation,
    cfg: PoolConfig,
    config: PolicyConfig,
    state: PoolState,
) -> Sizing:
    if config.policy == "queue":
        return size_queue(pool, config)
    if pool.role == "prefill":
        return size_prefill(obs, pool, cfg, config, state)
    if pool.role == "decode":
        return size_decode(obs, pool, cfg, config, state)
    # Aggregated: the pool does both phases; it needs whichever is larger.
    prefill = size_prefill(obs, pool, cfg, config, state)
    decode = size_decode(obs, pool, cfg, config, prefill.state)
    winner = prefill if prefill.replicas >= decode.replicas else decode
    return replace(winner, state=decode.state, panic=prefill.panic or decode.panic)


def _non_finite(pool: PoolObservation) -> str:
    """The first signal that is NaN or infinite (a broken exporter), or ``""``."""
    for f in fields(pool):
        value = getattr(pool, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            return f"{f.name} is {value}"
    return ""


def _hold(
    role: PoolRole, current: int, reason: str, cause: Cause | Literal[""] = "metrics"
) -> PoolDecision:
    """``current`` kept without sizing; ``cause`` ``metrics`` means they are missing."""
    available = cause != "metrics"
    return PoolDecision(role, current, current, reason, metrics_available=available, cause=cause)


def _from_zero_or_hold(obs: Observation, pool: PoolObservation, cfg: PoolConfig) -> PoolDecision:
    traffic = (obs.arrival_prompt_tokens_per_s or 0) > 0 or any(
        lat.requests > 0 for lat in obs.latency_by_class.values()
    )
    if pool.replicas == 0 and cfg.max_replicas > 0 and (traffic or cfg.min_replicas > 0):
        desired = max(cfg.min_replicas, 1)
        why = "the router has traffic" if traffic else f"min is {cfg.min_replicas}"
        cause: Cause = "traffic" if traffic else "min"
        return PoolDecision(pool.role, 0, desired, f"{pool.role} 0→{desired}: {why}", cause=cause)
    if pool.replicas == 0:
        return _hold(pool.role, 0, f"{pool.role} 0: no traffic", "idle")
    if pool.ready == 0 and not pool.failed:
        # Nothing to read yet is not missing metrics: loading weights takes minutes.
        why = f"{pool.replicas} pod(s) starting, none ready yet"
        return _hold(pool.role, pool.replicas, f"{pool.role} {pool.replicas}: holding, {why}", "")
    if pool.failed:
        detail = "; ".join(f"pod {pod}: {err}" for pod, err in sorted(pool.failed.items()))
    else:
        detail = f"{pool.scraped} of {pool.ready} ready pods answered"
    reason = f"{pool.role} {pool.replicas}: holding, metrics unavailable ({detail})"
    return _hold(pool.role, pool.replicas, reason)


def _apply_ratio(
    decisions: dict[PoolRole, PoolDecision], config: PolicyConfig
) -> dict[PoolRole, PoolDecision]:
    """Raise the smaller pool when prefill:decode leaves its declared bounds."""
    pre, dec = decisions.get("prefill"), decisions.get("decode")
    if pre is None or dec is None or not (pre.metrics_available and dec.metrics_available):
        return decisions
    pcfg, dcfg = config.pools["prefill"], config.pools["decode"]
    if config.ratio_min is not None and pre.desired < config.ratio_min * dec.desired:
        n = min(ceil_replicas(config.ratio_min * dec.desired), pcfg.max_replicas)
        if n > pre.desired:
            pre = replace(
                pre,
                desired=n,
                reason=f"{pre.reason}; raised to {n} by prefill:decode "
                f"ratio min {config.ratio_min:g}",
                cause="ratio",
            )
    if config.ratio_max is not None and pre.desired > config.ratio_max * dec.desired:
        n = min(ceil_replicas(pre.desired / config.ratio_max), dcfg.max_replicas)
        if n > dec.desired:
            dec = replace(
                dec,
                desired=n,
                reason=f"{dec.reason}; raised to {n} by prefill:decode "
                f"ratio max {config.ratio_max:g}",
                cause="ratio",
            )
    return {**decisions, "prefill": pre, "decode": dec}
