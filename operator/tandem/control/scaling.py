"""What the autoscaler's shell reads and writes, computed from plain objects. Pure.

:mod:`tandem.control.autoscale` fetches pods, scrapes and patches; everything it needs
to decide *what* to fetch and patch is here:

* the targets of one tick: per pool the Deployment's replicas, its ready pods and their
  metrics URLs (:func:`compute_pool_targets`), and the router pods
  (:func:`compute_router_targets`) — readiness is the router's own rule
  (:func:`tandem.router.pods.compute_pod_address`);
* the ``pod-deletion-cost`` annotations that differ from what the pods carry
  (:func:`compute_cost_annotations`);
* the status merge patch of a tick (:func:`compute_autoscaler_status_patch`), whose
  ``conditions`` list keeps the reconciler's conditions;
* a short, bounded reason code of a decision for metric labels
  (:func:`compute_reason_label`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tandem.api import InferenceService
from tandem.api.vocab import Component, PoolRole
from tandem.control.readiness import AUTOSCALER_TYPES
from tandem.control.tick import DELETION_COST_ANNOTATION, Tick
from tandem.controller.cache import is_older
from tandem.controller.conditions import merge_conditions
from tandem.manifests.meta import ROLE_LABEL, SERVICE_LABEL, child_name
from tandem.observe.source import PoolTargets, metrics_url
from tandem.policy.types import CAUSES, DRIVERS, PoolDecision
from tandem.router.pods import compute_pod_address

ROUTER_ROLE: Final = "router"
#: Every value :func:`compute_reason_label` returns (the ``reason`` label's whole range).
REASON_LABELS = (*DRIVERS, *CAUSES, "hold", "other")


@dataclass(frozen=True)
class Written:
    """A pool size this operator wrote through ``deployments/scale``, and the
    Deployment's resourceVersion that write produced (newer than a lagging cache)."""

    replicas: int
    resource_version: str


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name"))


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("labels") or {}


def compute_live_replicas(
    deployment: Mapping[str, Any], written: Written | None
) -> tuple[int, str | None]:
    """(replicas, resourceVersion) of a pool's Deployment as last known: the cached
    ``spec.replicas`` (1 when unset, as the API server defaults it), unless this
    operator's own later scale write is not in the cache yet."""
    meta = deployment.get("metadata") or {}
    rv = meta.get("resourceVersion")
    replicas = (deployment.get("spec") or {}).get("replicas")
    live = (1 if replicas is None else int(replicas), None if rv is None else str(rv))
    if written is None or not is_older(live[1], written.resource_version):
        return live
    return written.replicas, written.resource_version


def compute_pool_targets(
    isvc: InferenceService,
    deployments: Mapping[str, Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    written: Mapping[str, Written] | None = None,
) -> dict[PoolRole, PoolTargets] | None:
    """Per pool: replicas of its Deployment, its ready pods and their metrics URLs.

    ``deployments`` by name; ``written`` by Deployment name. None while a pool's
    Deployment does not exist yet (the reconciler creates it; nothing to size).
    """
    out: dict[PoolRole, PoolTargets] = {}
    pods = list(pods)
    for role in isvc.spec.pools():
        name = child_name(isvc, role)
        deployment = deployments.get(name)
        if deployment is None:
            return None
        replicas, _ = compute_live_replicas(deployment, (written or {}).get(name))
        urls = _ready_urls(pods, isvc.name, role)
        out[role] = PoolTargets(replicas=replicas, ready=len(urls), pods=urls)
    return out


def compute_router_targets(
    isvc: InferenceService, pods: Iterable[Mapping[str, Any]]
) -> dict[str, str]:
    """Router pod name → metrics URL, for the router pods that are ready."""
    return _ready_urls(pods, isvc.name, ROUTER_ROLE)


def _ready_urls(pods: Iterable[Mapping[str, Any]], service: str, role: Component) -> dict[str, str]:
    urls: dict[str, str] = {}
    for pod in pods:
        labels = _labels(pod)
        if labels.get(SERVICE_LABEL) != service or labels.get(ROLE_LABEL) != role:
            continue
        address = compute_pod_address(pod)
        if address is not None:
            urls[_name(pod)] = metrics_url(*address)
    return dict(sorted(urls.items()))


def compute_cost_annotations(
    pods: Iterable[Mapping[str, Any]], costs: Mapping[str, int]
) -> dict[str, str]:
    """Pod name → the ``pod-deletion-cost`` to write, for pods whose annotation differs.

    Pods not in ``costs`` keep theirs: a scale-down happens only when every ready pod
    answered, so those are pods not ready, which the ReplicaSet controller deletes before
    any ready pod whatever their cost (readiness ranks above deletion cost)."""
    out: dict[str, str] = {}
    for pod in pods:
        name = _name(pod)
        if name not in costs:
            continue
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        value = str(costs[name])
        if annotations.get(DELETION_COST_ANNOTATION) != value:
            out[name] = value
    return out


def compute_autoscaler_status_patch(
    live: Mapping[str, Any] | None,
    tick: Tick,
    *,
    generation: int | None,
    now: str,
) -> dict[str, Any]:
    """The merge patch of ``.status`` for one tick.

    A merge patch replaces the whole ``conditions`` list, so the list written is the
    live one with the autoscaler's conditions merged in: the reconciler's stay as they
    are, and a condition whose status did not change keeps its ``lastTransitionTime``.
    ``pools`` entries are merged field by field by the API server, so the reconciler's
    ``replicas``/``readyReplicas`` survive.
    """
    patch = dict(tick.status)
    patch["conditions"] = merge_conditions(
        list((live or {}).get("conditions") or []),
        tick.conditions,
        AUTOSCALER_TYPES,
        generation,
        now,
    )
    return patch


def compute_prometheus_window_s(isvc: InferenceService) -> float:
    """The range of the Prometheus source's rates, seconds: at least a minute, and four
    scrape intervals of the service's monitors (``rate`` needs two samples in range;
    four ride out a missed scrape).
    """
    return max(60.0, 4 * isvc.spec.monitoring.interval)


def compute_reason_label(decision: PoolDecision) -> str:
    """A short code of why a pool has its size, for the ``reason`` metric label.

    Bounded (:data:`REASON_LABELS`): the free text, with its numbers, goes to status and
    Events only. The policy's :attr:`~tandem.policy.types.PoolDecision.cause` when
    something overrode the need (``ratio``, ``min``, ``max``, ``traffic``, ``window``,
    ``panic``, ``metrics``, ``static``, ``idle``); otherwise, on a change, what drove it
    (:attr:`~tandem.policy.types.PoolDecision.driver`: ``demand``, ``backlog``,
    ``latency``, ``kv``, ``rate``, ``queue``, ``concurrency``, ``burst``), and ``hold``
    when the need matches the size.

    >>> reason = "decode 4→6: KV demand 1.13M tokens / (0.8 × 280k)"
    >>> compute_reason_label(PoolDecision("decode", 4, 6, reason, driver="kv"))
    'kv'
    """
    if not decision.metrics_available:
        return "metrics"
    if decision.cause:
        return decision.cause
    if decision.direction == "hold":
        return "hold"
    return decision.driver or "other"
