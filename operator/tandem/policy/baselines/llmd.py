"""llm-d's saturation analyzer (workload-variant-autoscaler), with its default thresholds.
Pure.

Follows workload-variant-autoscaler v0.5.0 (``internal/saturation``, and the Prometheus
collector of ``internal/collector``):

* **Per-pod peaks over the last minute.** The collector reads each pod's
  ``max_over_time(vllm:kv_cache_usage_perc[1m])`` and
  ``max_over_time(vllm:num_requests_waiting[1m])``, not the instantaneous gauges, so a
  queue that built and drained between two decisions still counts. Here the analyzer
  is ticked at the Prometheus scrape interval (15 s, the chart's ServiceMonitor), keeps
  each pod's samples of the last 60 s in its state and decides every 30 s on their
  peaks. Only pods that answer now count (WVA drops stale series of deleted pods).
* **Saturation.** A replica is saturated when its KV-cache usage is at least 0.80 or
  its queue at least 5 requests. Over the non-saturated replicas the analyzer averages
  the spare capacity (``0.80 - kv``, ``5 - queue``) and adds one replica when the spare
  KV is under 0.10 or the spare queue under 3 (or when every replica is saturated),
  unless replicas are still starting (cascade protection). It removes one replica only
  when every replica is non-saturated and the load spread over one replica fewer would
  still leave spare capacity above both triggers.

WVA's own default loop (``GLOBAL_OPT_INTERVAL``) is 60 s; this baseline decides every
30 s, which can only help it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.api.vocab import PoolRole
from tandem.observe.types import Observation, PoolObservation
from tandem.policy.baselines.base import per_pool
from tandem.policy.config import PoolConfig
from tandem.policy.types import Decision

#: Prometheus scrape interval of the engines (WVA chart's vLLM ServiceMonitor).
SCRAPE_INTERVAL_S = 15.0
#: The range of ``max_over_time`` in the collector's queries.
PEAK_WINDOW_S = 60.0
#: How often this baseline decides.
DECISION_INTERVAL_S = 30.0


@dataclass(frozen=True)
class LlmdState:
    samples: Mapping[str, tuple[tuple[float, float, float], ...]] = field(default_factory=dict)
    """Pod name → ``(time s, kv usage, waiting)`` scraped within the peak window."""
    last_decision_s: float | None = None


class LlmdSaturation:
    def __init__(
        self,
        pools: Mapping[PoolRole, PoolConfig],
        kv_threshold: float = 0.80,
        queue_threshold: float = 5.0,
        kv_spare_trigger: float = 0.10,
        queue_spare_trigger: float = 3.0,
        decision_interval_s: float = DECISION_INTERVAL_S,
        scrape_interval_s: float = SCRAPE_INTERVAL_S,
        peak_window_s: float = PEAK_WINDOW_S,
    ) -> None:
        self.name = "llm-d"
        self.pools = pools
        self.kv_threshold = kv_threshold
        self.queue_threshold = queue_threshold
        self.kv_spare = kv_spare_trigger
        self.queue_spare = queue_spare_trigger
        self.decision_interval_s = decision_interval_s
        self.peak_window_s = peak_window_s
        self.interval_s = scrape_interval_s
        """The driver ticks at the scrape interval; decisions come every
        ``decision_interval_s``."""

    def initial_state(self) -> LlmdState:
        return LlmdState()

    def decide(self, state: LlmdState, obs: Observation) -> tuple[LlmdState, Decision]:
        now = obs.now_s
        samples: dict[str, tuple[tuple[float, float, float], ...]] = {}
        for pool in obs.pools.values():
            for name, pod in pool.pods.items():
                # max_over_time(...[1m]) covers the samples of (now - 60 s, now].
                kept = tuple(
                    s for s in state.samples.get(name, ()) if s[0] > now - self.peak_window_s
                )
                samples[name] = (*kept, (now, pod.kv_usage, pod.waiting_requests))
        due = (
            state.last_decision_s is None
            or now - state.last_decision_s >= self.decision_interval_s - 1e-6
        )
        new_state = LlmdState(samples, now if due else state.last_decision_s)

        def size(role: PoolRole, pool: PoolObservation, cfg: PoolConfig) -> tuple[int, str]:
            if not due:
                return pool.replicas, "between decisions"
            return self._size(pool, samples)

        return new_state, per_pool(obs, self.pools, size)

    def peaks(
        self, pool: PoolObservation, samples: Mapping[str, tuple[tuple[float, float, float], ...]]
    ) -> list[tuple[float, float]]:
        """``(kv, waiting)`` of each answering pod: its peaks over the window."""
        out = []
        for name in pool.pods:
            seen = samples.get(name, ())
            out.append((max(s[1] for s in seen), max(s[2] for s in seen)))
        return out

    def _size(
        self, pool: PoolObservation, samples: Mapping[str, tuple[tuple[float, float, float], ...]]
    ) -> tuple[int, str]:
        current = pool.replicas
        loads = self.peaks(pool, samples)
        if not loads:  # no per-pod data: treat the pool mean as every replica
            per = max(pool.scraped, 1)
            loads = [(pool.kv_usage, pool.waiting_requests / per)] * per
        free = [(kv, q) for kv, q in loads if kv < self.kv_threshold and q < self.queue_threshold]
        if not free:
            if pool.replicas > pool.ready:
                return current, "all replicas saturated; waiting for pending replicas"
            return current + 1, f"all {len(loads)} replicas saturated (1 min peaks)"
        spare_kv = sum(self.kv_threshold - kv for kv, _ in free) / len(free)
        spare_q = sum(self.queue_threshold - q for _, q in free) / len(free)
        if spare_kv < self.kv_spare or spare_q < self.queue_spare:
            if pool.replicas > pool.ready:
                return current, "low spare capacity; waiting for pending replicas"
            return current + 1, f"spare KV {spare_kv:.2f}, spare queue {spare_q:.2f} (1 min peaks)"
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
