"""Headless engine Services, PodDisruptionBudgets and the engines' NetworkPolicy. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tandem.api import InferenceService
from tandem.api.vocab import Component, PoolRole
from tandem.manifests.meta import (
    HTTP_PORT,
    OPERATOR_POD_LABELS,
    ROLE_LABEL,
    SERVICE_LABEL,
    Owner,
    child_name,
    metadata,
    selector_labels,
)

PROMETHEUS_POD_LABELS = {"app.kubernetes.io/name": "prometheus"}


def build_engine_service(isvc: InferenceService, owner: Owner, role: PoolRole) -> dict[str, Any]:
    """``<name>-<role>``: a headless Service naming the pool's ready pods."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(isvc, owner, child_name(isvc, role), role),
        "spec": {
            "clusterIP": "None",
            "selector": selector_labels(isvc, role),
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def build_pdb(isvc: InferenceService, owner: Owner, role: Component) -> dict[str, Any]:
    """At most one pod of a pool (or of the router) voluntarily disrupted at a time."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(isvc, owner, child_name(isvc, role), role),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(isvc, role)}},
    }


def build_network_policy(
    isvc: InferenceService, owner: Owner, roles: Sequence[PoolRole]
) -> dict[str, Any]:
    """Only the router, the pools' own peers (KV side channel included), the operator's
    metrics scrapes and, with a PodMonitor, Prometheus reach the engine pods."""
    engines = {
        "matchLabels": {SERVICE_LABEL: isvc.name},
        "matchExpressions": [{"key": ROLE_LABEL, "operator": "In", "values": roles}],
    }
    http = [{"port": HTTP_PORT, "protocol": "TCP"}]
    ingress: list[dict[str, Any]] = [
        {
            "from": [{"podSelector": {"matchLabels": selector_labels(isvc, "router")}}],
            "ports": http,
        },
        # Peers: KV transfer (NIXL side channel and UCX data ports) between the pools.
        {"from": [{"podSelector": engines}]},
        {
            "from": [
                {"namespaceSelector": {}, "podSelector": {"matchLabels": OPERATOR_POD_LABELS}}
            ],
            "ports": http,
        },
    ]
    if isvc.spec.monitoring.pod_monitor:
        ingress.append(
            {
                "from": [
                    {"namespaceSelector": {}, "podSelector": {"matchLabels": PROMETHEUS_POD_LABELS}}
                ],
                "ports": http,
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(isvc, owner, child_name(isvc, "engines"), "engines"),
        "spec": {"podSelector": engines, "policyTypes": ["Ingress"], "ingress": ingress},
    }
