"""One autoscaler tick as the operator runs it: status in, decision and patches out. Pure.

The operator keeps no autoscaler state in memory: every tick reads it from
``status.autoscaler`` (:meth:`~tandem.policy.state.PolicyState.from_dict`), calls
:func:`~tandem.policy.decide.decide`, and writes back the new state together with what
users read: ``desiredReplicas``, the last decision with its reason, and the two
conditions the autoscaler owns, ``ScalingActive`` and ``MetricsAvailable``. A restarted
operator therefore loses nothing, and the parity test can check that this path and the
simulator's in-memory path make identical decisions. ``tandem up`` runs the same tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tandem.api.vocab import PoolRole
from tandem.controller.conditions import Condition
from tandem.observe.types import Observation, PoolObservation
from tandem.policy.config import PolicyConfig
from tandem.policy.decide import decide
from tandem.policy.state import PolicyState
from tandem.policy.types import Decision

#: Pod annotation the ReplicaSet controller reads to pick which pods to delete first.
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
SCALING_ACTIVE = "ScalingActive"
METRICS_AVAILABLE = "MetricsAvailable"


@dataclass(frozen=True)
class Tick:
    """What one tick decided and what the operator must write."""

    state: PolicyState
    decision: Decision
    scale: Mapping[PoolRole, int]
    """Role → replicas, only for pools whose size changes."""
    status: dict[str, Any]
    """A merge patch for ``.status``: ``pools`` and ``autoscaler`` (the policy's state)."""
    conditions: tuple[Condition, ...]
    """``ScalingActive`` and ``MetricsAvailable``, merged into the live list on write
    (:func:`tandem.control.scaling.compute_autoscaler_status_patch`)."""


def compute_tick(
    status: Mapping[str, Any] | None, obs: Observation, config: PolicyConfig, now_iso: str
) -> Tick:
    """Run the policy on ``obs`` with the state kept in ``status``."""
    state = PolicyState.from_dict((status or {}).get("autoscaler"))
    state, decision = decide(state, obs, config)
    pools: dict[PoolRole, Any] = {}
    for role, pool in decision.pools.items():
        entry: dict[str, Any] = {"desiredReplicas": pool.desired}
        if pool.desired != pool.current:
            entry["lastScaleTime"] = now_iso
            entry["lastDecision"] = {
                "time": now_iso,
                "fromReplicas": pool.current,
                "toReplicas": pool.desired,
                "reason": pool.reason,
            }
        pools[role] = entry
    conditions = (
        compute_scaling_condition(decision, config),
        compute_metrics_condition(decision, obs),
    )
    scale = {role: p.desired for role, p in decision.changes.items()}
    return Tick(
        state=state,
        decision=decision,
        scale=scale,
        status={"pools": pools, "autoscaler": state.to_dict()},
        conditions=conditions,
    )


def compute_scaling_condition(decision: Decision, config: PolicyConfig) -> Condition:
    """``ScalingActive``: False for the static policy, and (as the HPA says it) when no
    pool could be sized this tick because its metrics are missing."""
    message = f"policy {config.policy}; " + "; ".join(p.reason for p in decision.pools.values())
    if config.policy == "static":
        return Condition(SCALING_ACTIVE, "False", "StaticPolicy", message)
    if decision.pools and not any(p.metrics_available for p in decision.pools.values()):
        return Condition(SCALING_ACTIVE, "False", "MetricsMissing", message)
    return Condition(SCALING_ACTIVE, "True", "Autoscaling", message)


def compute_metrics_condition(decision: Decision, obs: Observation) -> Condition:
    """``MetricsAvailable``: False, naming each pod and its error, when a pool could not
    be sized for missing signals."""
    missing = [p.reason for p in decision.pools.values() if not p.metrics_available]
    if not missing:
        message = "every ready pod answered"
        if obs.errors:  # the router's latency is missing: the engines' own stands in
            message = "every ready engine pod answered; " + "; ".join(obs.errors)
        return Condition(METRICS_AVAILABLE, "True", "Scraped", message)
    detail = "; ".join([*missing, *obs.errors, *(f"no data: {q}" for q in obs.empty_queries)])
    return Condition(METRICS_AVAILABLE, "False", "MetricsMissing", detail)


def compute_deletion_costs(pool: PoolObservation) -> dict[str, int]:
    """Pod → ``pod-deletion-cost``: the least-loaded pods get the lowest cost, so a
    scale-down removes them first (running sequences weigh most: they would be cut)."""
    return {
        pod: round(g.running_requests * 10 + g.waiting_requests)
        for pod, g in sorted(pool.pods.items())
    }
