"""The interface every autoscaler in a comparison implements, and Tandem's own. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from tandem.api.vocab import PoolRole
from tandem.observe.types import Observation, PoolObservation
from tandem.policy.config import PolicyConfig, PoolConfig
from tandem.policy.decide import decide
from tandem.policy.state import PolicyState
from tandem.policy.types import Decision, PoolDecision


class Autoscaler(Protocol):
    """Sizes pools from observations; called every ``interval_s`` by its driver."""

    name: str
    interval_s: float

    def initial_state(self) -> Any: ...

    def decide(self, state: Any, obs: Observation) -> tuple[Any, Decision]: ...


class TandemAutoscaler:
    """Tandem's ``slo`` (or ``queue``) policy behind the common interface."""

    def __init__(self, config: PolicyConfig, name: str = "tandem") -> None:
        self.name = name
        self.config = config
        self.interval_s = config.interval_s

    def initial_state(self) -> PolicyState:
        return PolicyState()

    def decide(self, state: PolicyState, obs: Observation) -> tuple[PolicyState, Decision]:
        return decide(state, obs, self.config)


def per_pool(
    obs: Observation,
    pools: Mapping[PoolRole, PoolConfig],
    size: Callable[[PoolRole, PoolObservation, PoolConfig], tuple[int, str]],
) -> Decision:
    """A Decision from ``size(role, pool, cfg) -> (desired, reason)``, holding pools whose
    metrics are missing and clamping to each pool's bounds."""
    out: dict[PoolRole, PoolDecision] = {}
    for role, cfg in pools.items():
        pool = obs.pools.get(role)
        if pool is None or not pool.available:
            current = pool.replicas if pool is not None else cfg.initial_replicas
            out[role] = PoolDecision(
                role, current, current, f"{role}: metrics unavailable", {}, metrics_available=False
            )
            continue
        desired, reason = size(role, pool, cfg)
        desired = min(max(desired, cfg.min_replicas), cfg.max_replicas)
        out[role] = PoolDecision(
            role, pool.replicas, desired, f"{role} {pool.replicas}→{desired}: {reason}"
        )
    return Decision(now_s=obs.now_s, pools=out)
