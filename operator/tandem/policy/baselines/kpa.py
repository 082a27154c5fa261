"""Knative's Pod Autoscaler (KPA) with its default windows. Pure.

Follows Knative Serving 1.x's ``config-autoscaler`` defaults (unchanged since 1.0).
Every 2 s: concurrency averaged over the 60 s stable window and the 6 s panic window
(10%), each divided by the target per pod (``container-concurrency-target-default``
100 × ``target-utilization-percentage`` 70%). Panic mode starts when the panic-window
need reaches 200% of the ready pods and lasts until a whole stable window passes
without it; in panic the pool never shrinks. Scale-down is at most halving per tick
(``max-scale-down-rate`` 2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.api.vocab import PoolRole
from tandem.observe.types import Observation, PoolObservation
from tandem.policy.baselines.base import per_pool
from tandem.policy.config import PoolConfig
from tandem.policy.types import Decision


@dataclass(frozen=True)
class KpaPoolState:
    samples: tuple[tuple[float, float], ...] = ()
    """(time s, concurrency) observed, over the stable window."""
    panic_since_s: float | None = None
    """When panic mode started (``None``: not panicking)."""
    last_panic_s: float | None = None


@dataclass(frozen=True)
class KpaState:
    pools: Mapping[str, KpaPoolState] = field(default_factory=dict)


class Kpa:
    """KPA on each pool's in-flight requests (running + waiting)."""

    def __init__(
        self,
        pools: Mapping[PoolRole, PoolConfig],
        target_per_pod: float = 100.0,
        target_utilization: float = 0.7,
        stable_window_s: float = 60.0,
        panic_window_fraction: float = 0.1,
        panic_threshold: float = 2.0,
        max_scale_down_rate: float = 2.0,
        tick_s: float = 2.0,
    ) -> None:
        self.name = "kpa"
        self.pools = pools
        self.target = target_per_pod * target_utilization
        self.stable_s = stable_window_s
        self.panic_s = stable_window_s * panic_window_fraction
        self.panic_threshold = panic_threshold
        self.max_down_rate = max_scale_down_rate
        self.interval_s = tick_s

    def initial_state(self) -> KpaState:
        return KpaState()

    def decide(self, state: KpaState, obs: Observation) -> tuple[KpaState, Decision]:
        states = dict(state.pools)
        now = obs.now_s

        def size(role: PoolRole, pool: PoolObservation, cfg: PoolConfig) -> tuple[int, str]:
            s = states.get(role, KpaPoolState())
            conc = pool.running_requests + pool.waiting_requests
            samples = (*(x for x in s.samples if x[0] > now - self.stable_s), (now, conc))
            stable = sum(c for _, c in samples) / len(samples)
            recent = [c for t, c in samples if t > now - self.panic_s] or [conc]
            panic_avg = sum(recent) / len(recent)
            want_stable = math.ceil(stable / self.target - 1e-9)
            want_panic = math.ceil(panic_avg / self.target - 1e-9)
            ready = max(pool.ready, 1)
            panic_since, last_panic = s.panic_since_s, s.last_panic_s
            if want_panic / ready >= self.panic_threshold:
                panic_since = panic_since if panic_since is not None else now
                last_panic = now
            elif (
                panic_since is not None
                and last_panic is not None
                and now - last_panic >= self.stable_s
            ):
                panic_since = None
            current = pool.replicas
            if panic_since is not None:
                desired = max(want_panic, current)
                why = f"panic: {panic_avg:.3g} in flight (6 s) / {self.target:g} per pod"
            else:
                desired = max(want_stable, math.ceil(current / self.max_down_rate))
                why = f"{stable:.3g} in flight (60 s) / {self.target:g} per pod"
            states[role] = KpaPoolState(samples, panic_since, last_panic)
            return desired, why

        decision = per_pool(obs, self.pools, size)
        return KpaState(states), decision
