"""The ``InferenceService`` status as pydantic models. Pure.

Written by the operator (conditions, pools) and the autoscaler (desired replicas, last
decision, and the state it must keep across operator restarts). Never holds secrets.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tandem.api.base import Model, OpaqueState

ConditionType = Literal[
    "Ready",
    "PrefillReady",
    "DecodeReady",
    "PoolReady",
    "RouterReady",
    "ScalingActive",
    "MetricsAvailable",
]


class Condition(Model):
    """A Kubernetes-style condition (``metav1.Condition`` fields)."""

    type: ConditionType
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: str | None = None
    observed_generation: int | None = Field(default=None, ge=0)


class ScaleDecisionStatus(Model):
    """The autoscaler's last decision for one pool, with the numbers behind it."""

    time: str
    from_replicas: int = Field(ge=0)
    to_replicas: int = Field(ge=0)
    reason: str


class PoolStatus(Model):
    """Observed and desired size of one pool."""

    replicas: int = Field(default=0, ge=0, description="Pods the Deployment has.")
    ready_replicas: int = Field(default=0, ge=0, description="Pods ready to serve.")
    desired_replicas: int | None = Field(default=None, ge=0, description="Autoscaler's target.")
    last_scale_time: str | None = None
    last_decision: ScaleDecisionStatus | None = None


class InferenceServiceStatus(Model):
    """Observed state of an InferenceService."""

    observed_generation: int | None = Field(default=None, ge=0)
    conditions: list[Condition] = Field(default_factory=list)
    router_url: str | None = Field(default=None, alias="routerURL")
    pools: dict[str, PoolStatus] = Field(default_factory=dict)
    autoscaler: OpaqueState | None = Field(
        default=None,
        description="Autoscaler state that survives operator restarts (windows, learned "
        "capacity), opaque to users; and requests: the last window's requests/s no pool "
        "size could serve within target (infeasible_per_s, by reason) and absorbed by "
        "decode engines (absorbed_per_s, absorbed_prompt_tokens_per_s).",
    )
