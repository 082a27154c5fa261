"""The autoscaler policy: ``decide(state, observation, config) -> (state, decision)``. Pure.

One policy, several drivers: the operator's timer, ``tandem up`` and the fleet
simulator call the same :func:`decide`. Baselines it is compared with live beside it.
"""

from tandem.policy.config import PolicyConfig, PoolConfig, compute_policy_config
from tandem.policy.decide import decide
from tandem.policy.state import PolicyState, PoolState
from tandem.policy.types import Decision, PoolDecision

__all__ = [
    "Decision",
    "PolicyConfig",
    "PolicyState",
    "PoolConfig",
    "PoolDecision",
    "PoolState",
    "compute_policy_config",
    "decide",
]
