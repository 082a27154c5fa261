"""The Kubernetes HorizontalPodAutoscaler (autoscaling/v2) with its default behavior. Pure.

``desired = ceil(current × metric / target)``, skipped while ``|metric/target − 1|`` is
within the 10% tolerance; synced every 15 s; scale-up limited to the larger of 4 pods
or 100% per 15 s; scale-down to the highest recommendation of the last 300 s.
The metric here is the pool's mean GPU utilization (what DCGM exports); :class:`Keda`
reuses this class with an ``AverageValue`` metric.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tandem.api.vocab import PoolRole
from tandem.observe.types import Observation, PoolObservation
from tandem.policy.baselines.base import per_pool
from tandem.policy.config import PoolConfig
from tandem.policy.types import Decision

HpaState = Mapping[str, tuple[tuple[float, int], ...]]


@dataclass(frozen=True)
class HpaBehavior:
    """HPA defaults (``kubectl explain hpa.spec.behavior``)."""

    sync_period_s: float = 15.0
    tolerance: float = 0.1
    scale_up_window_s: float = 0.0
    scale_down_window_s: float = 300.0
    scale_up_pods: int = 4
    scale_up_percent: float = 100.0


def compute_hpa_replicas(current: int, ratio: float, tolerance: float) -> int:
    """The HPA formula: ``ceil(current × ratio)``, unchanged within the tolerance.

    >>> compute_hpa_replicas(4, 1.5, 0.1), compute_hpa_replicas(4, 1.05, 0.1)
    (6, 4)
    """
    if abs(ratio - 1.0) <= tolerance:
        return current
    return math.ceil(current * ratio - 1e-9)


class Hpa:
    """HPA on a per-pod average metric against a target (utilization by default)."""

    def __init__(
        self,
        pools: Mapping[PoolRole, PoolConfig],
        target: float = 0.7,
        metric: Callable[[PoolObservation], float | None] | None = None,
        behavior: HpaBehavior = HpaBehavior(),
        name: str = "hpa",
        average_value: bool = False,
    ) -> None:
        self.name = name
        self.pools = pools
        self.target = target
        self.metric = metric or (lambda p: p.gpu_utilization)
        self.behavior = behavior
        self.interval_s = behavior.sync_period_s
        self.average_value = average_value

    def initial_state(self) -> HpaState:
        return {}

    def decide(self, state: HpaState, obs: Observation) -> tuple[HpaState, Decision]:
        new_state = dict(state)
        b = self.behavior

        def size(role: PoolRole, pool: PoolObservation, cfg: PoolConfig) -> tuple[int, str]:
            value = self.metric(pool)
            current = pool.replicas
            if value is None:
                return current, "metric missing"
            if self.average_value:  # KEDA/AverageValue: the metric is a total over pods
                ratio = value / (self.target * max(current, 1))
            else:
                ratio = value / self.target
            raw = min(
                max(compute_hpa_replicas(current, ratio, b.tolerance), cfg.min_replicas),
                cfg.max_replicas,
            )
            keep = max(b.scale_up_window_s, b.scale_down_window_s)
            recs = tuple((t, n) for t, n in state.get(role, ()) if t >= obs.now_s - keep)
            recs = (*recs, (obs.now_s, raw))
            new_state[role] = recs
            if raw > current:
                up = min(n for t, n in recs if t >= obs.now_s - b.scale_up_window_s)
                limit = max(
                    current + b.scale_up_pods, math.floor(current * (1 + b.scale_up_percent / 100))
                )
                desired = min(up, limit)
            elif raw < current:
                desired = min(
                    current, max(n for t, n in recs if t >= obs.now_s - b.scale_down_window_s)
                )
            else:
                desired = current
            return desired, f"metric {value:.3g} vs target {self.target:g} (ratio {ratio:.2f})"

        return new_state, per_pool(obs, self.pools, size)
