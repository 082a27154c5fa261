"""llm-d's saturation analyzer (workload-variant-autoscaler), with its default thresholds.

A replica is saturated when its KV-cache usage is at least 0.80 or its queue at least
5 requests. Over the non-saturated replicas the analyzer averages the spare capacity
(``0.80 − kv``, ``5 − queue``) and adds one replica when the spare KV is under 0.10 or
the spare queue under 3 (or when every replica is saturated), unless replicas are still
starting. It removes one replica only when every replica is non-saturated and the load
spread over one replica fewer would still leave spare capacity above both triggers. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from tandem.api.vocab import PoolRole
from tandem.observe.types import Observation, PoolObservation
from tandem.policy.baselines.base import per_pool
from tandem.policy.config import PoolConfig
from tandem.policy.types import Decision


class LlmdSaturation:
    def __init__(
        self,
        pools: Mapping[PoolRole, PoolConfig],
        kv_threshold: float = 0.80,
        queue_threshold: float = 5.0,
        kv_spare_trigger: float = 0.10,
        queue_spare_trigger: float = 3.0,
        interval_s: float = 30.0,
    ) -> None:
        self.name = "llm-d"
        self.pools = pools
        self.kv_threshold = kv_threshold
        self.queue_threshold = queue_threshold
        self.kv_spare = kv_spare_trigger
        self.queue_spare = queue_spare_trigger
        self.interval_s = interval_s

    def initial_state(self) -> None:
        return None

    def decide(self, state: None, obs: Observation) -> tuple[None, Decision]:
        return None, per_pool(obs, self.pools, self._size)

    def _size(self, role: PoolRole, pool: PoolObservation, cfg: PoolConfig) -> tuple[int, str]:
        current = pool.replicas
        loads = [(p.kv_usage, p.waiting_requests) for p in pool.pods.values()]
        if not loads:  # no per-pod data: treat the pool mean as every replica
            per = max(pool.scraped, 1)
            loads = [(pool.kv_usage, pool.waiting_requests / per)] * per
        free = [(kv, q) for kv, q in loads if kv < self.kv_threshold and q < self.queue_threshold]
        if not free:
            if pool.replicas > pool.ready:
                return current, "all replicas saturated; waiting for pending replicas"
            return current + 1, f"all {len(loads)} replicas saturated"
        spare_kv = sum(self.kv_threshold - kv for kv, _ in free) / len(free)
        spare_q = sum(self.queue_threshold - q for _, q in free) / len(free)
        if spare_kv < self.kv_spare or spare_q < self.queue_spare:
            if pool.replicas > pool.ready:
                return current, "low spare capacity; waiting for pending replicas"
            return current + 1, f"spare KV {spare_kv:.2f}, spare queue {spare_q:.2f}"
        if len(free) == len(loads) and len(free) >= 2:
            rest = len(free) - 1
            kv_after = self.kv_threshold - sum(kv for kv, _ in free) / rest
            q_after = self.queue_threshold - sum(q for _, q in free) / rest
            if kv_after >= self.kv_spare and q_after >= self.queue_spare:
                return (
                    current - 1,
                    f"spare after removing one: KV {kv_after:.2f}, queue {q_after:.2f}",
                )
        return current, f"spare KV {spare_kv:.2f}, spare queue {spare_q:.2f}"
