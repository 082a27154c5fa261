"""Factories for policy tests: configs and observations built in code."""

from __future__ import annotations

from typing import Any

from tandem.observe.types import LatencyObservation, Observation, PoolObservation
from tandem.policy.config import LatencyTargets, PolicyConfig, PoolConfig


def make_config(**overrides: Any) -> PolicyConfig:
    pools = overrides.pop("pools", None) or {
        "prefill": PoolConfig("prefill", 1, 16, 1, prefill_tokens_per_s=10_000.0),
        "decode": PoolConfig("decode", 1, 16, 1, kv_token_capacity=100_000.0, max_num_seqs=256),
    }
    base: dict[str, Any] = {
        "policy": "slo",
        "objective": "balanced",
        "targets": LatencyTargets(1.0, 90, 0.05, 90),
        "pools": pools,
        "interval_s": 15.0,
        "scale_down_window_s": 300.0,
        "cold_start_s": 60.0,
    }
    base.update(overrides)
    return PolicyConfig(**base)


def make_pool(role: str, replicas: int = 2, **fields: Any) -> PoolObservation:
    values: dict[str, Any] = {"ready": replicas, "scraped": replicas}
    values.update(fields)
    return PoolObservation(role=role, replicas=replicas, **values)


def make_obs(
    now_s: float,
    *pools: PoolObservation,
    ttft_s: float | None = None,
    itl_s: float | None = None,
    **fields: Any,
) -> Observation:
    latency = {}
    if ttft_s is not None or itl_s is not None:
        latency["default"] = LatencyObservation(
            ttft_s={90: ttft_s} if ttft_s is not None else {},
            itl_s={90: itl_s} if itl_s is not None else {},
            requests=100.0,
        )
    return Observation(
        now_s=now_s,
        window_s=15.0,
        pools={p.role: p for p in pools},
        latency_by_class=latency,
        **fields,
    )


def prefill_load(replicas: int, tokens_per_s: float, waiting: float = 0.0) -> PoolObservation:
    return make_pool(
        "prefill",
        replicas,
        prompt_tokens_per_s=tokens_per_s,
        requests_finished_per_s=tokens_per_s / 1000,
        waiting_requests=waiting,
    )


def decode_load(
    replicas: int, running: float, kv_usage: float, waiting: float = 0.0
) -> PoolObservation:
    return make_pool(
        "decode",
        replicas,
        running_requests=running,
        kv_usage=kv_usage,
        waiting_requests=waiting,
        generation_tokens_per_s=running * 20,
        requests_finished_per_s=running * 20 / 200,
    )
