"""The words Tandem's parts share, as types: pool roles, modes, policies, objectives. Pure.

Kept here, in the lowest layer, so the builders, the policy, the observers, the router and
the simulator name a pool or a policy the same way and the type checker catches a typo.
"""

from __future__ import annotations

from typing import Literal, get_args

PoolRole = Literal["prefill", "decode", "pool"]
"""A pool of engines: ``prefill`` and ``decode`` (disaggregated) or ``pool`` (aggregated)."""
POOL_ROLES: tuple[PoolRole, ...] = get_args(PoolRole)


def parse_pool_role(value: object) -> PoolRole | None:
    """``value`` as a pool role, or None when it is not one (stored state, labels).

    >>> parse_pool_role("decode"), parse_pool_role("router")
    ('decode', None)
    """
    for role in POOL_ROLES:
        if value == role:
            return role
    return None


Mode = Literal["disaggregated", "aggregated"]
"""Separate prefill and decode pools, or one pool doing both."""

PolicyName = Literal["slo", "queue", "static"]
"""The autoscaler's policy (``spec.autoscaling.policy``)."""

Objective = Literal["latency", "balanced", "throughput"]
"""What the policy trades toward (``spec.qos.objective``)."""

Component = Literal["prefill", "decode", "pool", "router", "engines"]
"""A part of what an InferenceService runs, as labels and child names say it: a pool, the
router, or ``engines`` (what covers every pool: their NetworkPolicy and PodMonitor)."""
