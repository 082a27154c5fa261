"""A reimplementation of the formulas of NVIDIA Dynamo's SLA planner. Pure.

Follows the planner's throughput-based mode (``components/planner``, ``planner_core.py``,
defaults of ``SLAPlannerDefaults``); the experimental load-based mode of later releases
is not modelled. Every adjustment interval (180 s by default), with a constant load
predictor:

* correction factors ``p = observed TTFT / expected TTFT`` and
  ``d = observed ITL / expected ITL`` from the offline profile;
* prefill replicas ``= ceil(rate × ISL × min(1, p) / prefill throughput per GPU /
  GPUs per engine)``;
* decode replicas ``= ceil(rate × OSL / decode throughput per GPU at ITL target / d
  and context ISL + OSL/2 / GPUs per engine)``.

The profile is what Dynamo's pre-deployment profiling measures; the fleet simulator
builds one from the engine model (:class:`PerfProfile`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

from tandem.api.vocab import PoolRole
from tandem.observe.types import Observation, PoolObservation
from tandem.policy.baselines.base import per_pool
from tandem.policy.config import LatencyTargets, PoolConfig
from tandem.policy.types import Decision

ADJUSTMENT_INTERVAL_S = 180.0


class PerfProfile(Protocol):
    """Profiled performance of one engine (per GPU), as Dynamo's profiler produces it."""

    def prefill_throughput_per_gpu(self, isl_tokens: float) -> float:
        """Prompt tokens/s per GPU at the TTFT target for prompts of ``isl_tokens``."""
        ...

    def expected_ttft_s(self, isl_tokens: float) -> float:
        """TTFT of a lone prompt of ``isl_tokens``."""
        ...

    def decode_throughput_per_gpu(self, itl_s: float, context_tokens: float) -> float:
        """Best output tokens/s per GPU whose ITL stays within ``itl_s``."""
        ...

    def expected_itl_s(self, batch: float, context_tokens: float) -> float:
        """ITL of a decode batch of ``batch`` sequences of ``context_tokens``."""
        ...


class DynamoSlaPlanner:
    def __init__(
        self,
        pools: Mapping[PoolRole, PoolConfig],
        profile: PerfProfile,
        targets: LatencyTargets,
        interval_s: float = ADJUSTMENT_INTERVAL_S,
    ) -> None:
        self.name = "dynamo"
        self.pools = pools
        self.profile = profile
        self.targets = targets
        self.interval_s = interval_s

    def initial_state(self) -> None:
        return None

    def decide(self, state: None, obs: Observation) -> tuple[None, Decision]:
        return None, per_pool(obs, self.pools, lambda r, p, c: self._size(obs, r, p, c))

    def _size(
        self, obs: Observation, role: PoolRole, pool: PoolObservation, cfg: PoolConfig
    ) -> tuple[int, str]:
        latency = next(iter(obs.latency_by_class.values()), None) or pool.latency
        gpus = max(cfg.gpus_per_replica, 1)
        prefill = obs.pools.get("prefill")
        decode = obs.pools.get("decode")
        rate = (prefill or pool).requests_finished_per_s
        isl = (prefill.prompt_tokens_per_s / rate) if prefill and rate > 0 else 0.0
        d_rate = (decode or pool).requests_finished_per_s
        osl = (decode.generation_tokens_per_s / d_rate) if decode and d_rate > 0 else 0.0
        if role == "prefill":
            if rate <= 0 or isl <= 0:
                return cfg.min_replicas, "no requests"
            observed = latency.ttft_s.get(50) if latency else None
            corr = observed / self.profile.expected_ttft_s(isl) if observed else 1.0
            load = rate * isl * min(1.0, corr)
            n = math.ceil(load / self.profile.prefill_throughput_per_gpu(isl) / gpus - 1e-9)
            return n, f"{load:.4g} prompt tok/s, correction {corr:.2f}"
        if d_rate <= 0 or osl <= 0:
            return cfg.min_replicas, "no requests"
        context = isl + osl / 2
        observed = latency.itl_s.get(50) if latency else None
        batch = pool.running_requests / max(pool.ready, 1)
        corr = (
            observed / self.profile.expected_itl_s(batch, context)
            if observed and batch > 0
            else 1.0
        )
        itl_target = (self.targets.itl_s or 0.05) / max(corr, 1e-6)
        thpt = self.profile.decode_throughput_per_gpu(itl_target, context)
        n = math.ceil(d_rate * osl / max(thpt, 1e-9) / gpus - 1e-9)
        return n, f"{d_rate * osl:.4g} output tok/s, correction {corr:.2f}"
