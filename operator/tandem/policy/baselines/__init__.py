"""Autoscalers Tandem's policy is compared with, each faithful to its published defaults.

All share :class:`~tandem.policy.baselines.base.Autoscaler`: ``initial_state()`` and
``decide(state, observation) -> (state, Decision)`` called every ``interval_s``, the
same shape as Tandem's own policy (:class:`TandemAutoscaler`), so the fleet simulator
drives them all the same way. Pure.
"""

from tandem.policy.baselines.base import Autoscaler, TandemAutoscaler
from tandem.policy.baselines.dynamo import DynamoSlaPlanner, PerfProfile
from tandem.policy.baselines.hpa import Hpa, HpaBehavior
from tandem.policy.baselines.keda import Keda
from tandem.policy.baselines.kpa import Kpa
from tandem.policy.baselines.llmd import LlmdSaturation

__all__ = [
    "Autoscaler",
    "DynamoSlaPlanner",
    "Hpa",
    "HpaBehavior",
    "Keda",
    "Kpa",
    "LlmdSaturation",
    "PerfProfile",
    "TandemAutoscaler",
]
