"""InferenceService status from its children's own status: conditions, pools, URL. Pure.

Each component (a pool's Deployment or the router's) gets a condition — ``PrefillReady``,
``DecodeReady`` (disaggregated), ``PoolReady`` (aggregated), ``RouterReady`` — read from
the Deployment's ``Available`` condition and ready replicas; ``Ready`` rolls them up.
Every condition has a reason a machine can match and a message a person can act on::

    PrefillReady=False  MinimumReplicasUnavailable  "1/3 replicas of Deployment chat-prefill
                                                     ready: Deployment does not have minimum
                                                     availability."
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tandem.api import InferenceService
from tandem.api.vocab import Component, PoolRole
from tandem.controller.conditions import Condition, merge_conditions
from tandem.manifests import router_url
from tandem.manifests.meta import ENGINE_ROLES, child_name

#: Condition types this module owns (the autoscaler owns ScalingActive, MetricsAvailable).
OWNED_TYPES = frozenset({"Ready", "PrefillReady", "DecodeReady", "PoolReady", "RouterReady"})
#: Condition types the autoscaler owns (:mod:`tandem.control.scaling`); never touched here.
AUTOSCALER_TYPES = frozenset({"ScalingActive", "MetricsAvailable"})
ROLE_CONDITION = {
    "prefill": "PrefillReady",
    "decode": "DecodeReady",
    "pool": "PoolReady",
    "router": "RouterReady",
}


@dataclass(frozen=True)
class DesiredStatus:
    """The part of ``.status`` the reconciler owns, as it should be now.

    ``managed`` lists the condition types to set or, when absent from ``conditions``,
    to remove; ``pools`` None leaves ``status.pools`` as it is.
    """

    conditions: tuple[Condition, ...]
    managed: frozenset[str]
    pools: Mapping[PoolRole, Mapping[str, int]] | None
    router_url: str | None


def _deployment_condition(deployment: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for cond in (deployment.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


def compute_component(
    role: Component, name: str, deployment: Mapping[str, Any] | None
) -> Condition:
    """The condition of one component from its Deployment (None: not there)."""
    kind = ROLE_CONDITION[role]
    if deployment is None:
        return Condition(
            kind, "False", "DeploymentMissing", f"Deployment {name} does not exist yet"
        )
    spec_replicas = (deployment.get("spec") or {}).get("replicas", 1)
    status = deployment.get("status") or {}
    ready = int(status.get("readyReplicas") or 0)
    generation = (deployment.get("metadata") or {}).get("generation")
    observed = status.get("observedGeneration")
    if observed is None or (generation is not None and observed < generation):
        return Condition(
            kind,
            "False",
            "RolloutPending",
            "waiting for the Deployment controller to report on the latest spec of "
            f"Deployment {name}",
        )
    if spec_replicas == 0:
        return Condition(kind, "False", "ScaledToZero", f"Deployment {name} has 0 replicas")
    available = _deployment_condition(deployment, "Available")
    summary = f"{ready}/{spec_replicas} replicas of Deployment {name} ready"
    if available.get("status") == "True" and ready >= 1:
        return Condition(kind, "True", "DeploymentAvailable", summary)
    reason = str(available.get("reason") or "DeploymentUnavailable")
    detail = available.get("message")
    return Condition(kind, "False", reason, f"{summary}: {detail}" if detail else summary)


def compute_ready(components: Iterable[Condition]) -> Condition:
    """``Ready``: True when every component is; else why the first one is not."""
    parts = list(components)
    failing = [c for c in parts if c.status != "True"]
    if not failing:
        return Condition("Ready", "True", "AllComponentsReady", "; ".join(c.message for c in parts))
    first = failing[0]
    role = first.type.removesuffix("Ready")
    return Condition("Ready", "False", f"{role}NotReady", "; ".join(c.message for c in failing))


def compute_status(
    isvc: InferenceService,
    deployments: Mapping[str, Mapping[str, Any]],
    *,
    error: str | None = None,
) -> DesiredStatus:
    """Desired status from the service and its Deployments by name.

    ``error`` (a failed reconcile a person must fix) turns ``Ready`` False with reason
    ``ReconcileError`` and that message, whatever the components say.
    """
    roles: list[Component] = [*isvc.spec.pools(), "router"]
    components = tuple(
        compute_component(role, child_name(isvc, role), deployments.get(child_name(isvc, role)))
        for role in roles
    )
    ready = compute_ready(components)
    if error is not None:
        ready = Condition("Ready", "False", "ReconcileError", error)
    pools = {
        role: {
            "replicas": int(
                (deployments.get(child_name(isvc, role), {}).get("status") or {}).get("replicas")
                or 0
            ),
            "readyReplicas": int(
                (deployments.get(child_name(isvc, role), {}).get("status") or {}).get(
                    "readyReplicas"
                )
                or 0
            ),
        }
        for role in isvc.spec.pools()
    }
    return DesiredStatus((ready, *components), OWNED_TYPES, pools, router_url(isvc))


def compute_invalid_status(message: str, reason: str = "InvalidSpec") -> DesiredStatus:
    """Status of a resource the semantic rules (or the operator's restrictions,
    ``PolicyViolation``) reject: only ``Ready`` changes."""
    return DesiredStatus(
        (Condition("Ready", "False", reason, message),), frozenset({"Ready"}), None, None
    )


def compute_status_patch(
    live: Mapping[str, Any] | None, desired: DesiredStatus, *, generation: int | None, now: str
) -> dict[str, Any] | None:
    """The merge patch of ``.status`` that makes ``live`` show ``desired``; None if it does.

    Conditions of other types (the autoscaler's) stay where they are; a condition whose
    status did not change keeps its ``lastTransitionTime``; pools of roles the service
    no longer runs are removed.
    """
    live = dict(live or {})
    patch: dict[str, Any] = {}
    if generation is not None and live.get("observedGeneration") != generation:
        patch["observedGeneration"] = generation
    if desired.router_url is not None and live.get("routerURL") != desired.router_url:
        patch["routerURL"] = desired.router_url
    conditions = merge_conditions(
        live.get("conditions") or [], desired.conditions, desired.managed, generation, now
    )
    if conditions != (live.get("conditions") or []):
        patch["conditions"] = conditions
    if desired.pools is not None:
        pools = _pools_patch(live.get("pools") or {}, desired.pools)
        if pools:
            patch["pools"] = pools
    return patch or None


def _pools_patch(
    live: Mapping[str, Any], desired: Mapping[PoolRole, Mapping[str, int]]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for role, fields in desired.items():
        have = live.get(role) or {}
        changed = {k: v for k, v in fields.items() if have.get(k) != v}
        if changed:
            out[role] = changed
    for name in live:
        if name not in desired and name in ENGINE_ROLES:
            out[name] = None
    return out
