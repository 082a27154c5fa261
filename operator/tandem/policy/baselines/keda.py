"""KEDA's Prometheus scaler on ``vllm:num_requests_waiting``, as production-stack ships it.

KEDA polls every 30 s and feeds an ``AverageValue`` target of 5 waiting requests per
replica to an HPA, so ``desired = ceil(sum(waiting) / 5)`` with the HPA's tolerance,
scale-up limits and 300 s scale-down stabilization. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from tandem.api.vocab import PoolRole
from tandem.policy.baselines.hpa import Hpa, HpaBehavior
from tandem.policy.config import PoolConfig

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
            behavior=HpaBehavior(sync_period_s=KEDA_POLLING_INTERVAL_S),
            name="keda",
            average_value=True,
        )
