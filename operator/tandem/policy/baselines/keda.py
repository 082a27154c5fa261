"""KEDA's Prometheus scaler on ``vllm:num_requests_waiting``, as production-stack ships it.
Pure.

Follows KEDA v2.17: a ScaledObject with a Prometheus trigger of threshold 5 creates an
HPA whose external metric has an ``AverageValue`` target of 5 waiting requests per
replica, so ``desired = ceil(sum(waiting) / 5)`` with the HPA's tolerance, scale-up
limits and 300 s scale-down stabilization (:class:`~tandem.policy.baselines.hpa.Hpa`).
Between 1 and N replicas the HPA decides, on its own 15 s sync loop, and KEDA's metrics
server answers each of its queries from Prometheus (``useCachedMetrics`` is off by
default); the ScaledObject's 30 s ``pollingInterval`` only paces activation between 0
and 1 replica, which a pool with a minimum of 1 never uses.
"""

from __future__ import annotations

from collections.abc import Mapping

from tandem.api.vocab import PoolRole
from tandem.policy.baselines.hpa import Hpa, HpaBehavior
from tandem.policy.config import PoolConfig

#: The ScaledObject's default ``pollingInterval``: activation (0 <-> 1) only.
KEDA_POLLING_INTERVAL_S = 30.0
WAITING_THRESHOLD = 5.0


class Keda(Hpa):
    """Each pool scaled on its own summed ``vllm:num_requests_waiting``."""

    def __init__(
        self, pools: Mapping[PoolRole, PoolConfig], threshold: float = WAITING_THRESHOLD
    ) -> None:
        super().__init__(
            pools,
            target=threshold,
            metric=lambda p: p.waiting_requests,
            behavior=HpaBehavior(),
            name="keda",
            average_value=True,
        )
