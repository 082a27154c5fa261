"""Headless engine Services, PodDisruptionBudgets and the NetworkPolicies. Pure.

Every peer outside the service's own namespace is selected by namespace *and* label: a
pod label alone is something any tenant can set on any pod of their own namespace (a pod
labelled ``app.kubernetes.io/name: tandem-operator`` would otherwise reach every engine,
and with ``kv_transfer_params`` make a decode engine connect where it chose).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class NetworkPeers:
    """Where the operator and Prometheus run: the namespaces whose pods (with their
    labels) may reach the engines' HTTP port."""

    operator_namespace: str = "tandem-system"
    prometheus_namespaces: tuple[str, ...] = ("monitoring",)


def _in_namespaces(namespaces: Sequence[str], pod_labels: dict[str, str]) -> dict[str, Any]:
    return {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(namespaces)}
            ]
        },
        "podSelector": {"matchLabels": dict(pod_labels)},
    }


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
    isvc: InferenceService,
    owner: Owner,
    roles: Sequence[PoolRole],
    peers: NetworkPeers | None = None,
) -> dict[str, Any]:
    """Only the router, the pools' own peers (KV side channel included), the operator's
    metrics scrapes (from its namespace) and, with a PodMonitor, Prometheus (from its
    namespaces) reach the engine pods."""
    peers = peers or NetworkPeers()
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
            "from": [_in_namespaces([peers.operator_namespace], OPERATOR_POD_LABELS)],
            "ports": http,
        },
    ]
    if isvc.spec.monitoring.pod_monitor and peers.prometheus_namespaces:
        ingress.append(
            {
                "from": [_in_namespaces(peers.prometheus_namespaces, PROMETHEUS_POD_LABELS)],
                "ports": http,
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(isvc, owner, child_name(isvc, "engines"), "engines"),
        "spec": {"podSelector": engines, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def build_router_network_policy(
    isvc: InferenceService, owner: Owner, peers: NetworkPeers | None = None
) -> dict[str, Any]:
    """The router pods take traffic on their HTTP port only: clients from anywhere (the
    router is the service's front door), nothing on any other port."""
    del peers  # every client may reach the router; kept for symmetry with the engines'
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(isvc, owner, child_name(isvc, "router"), "router"),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(isvc, "router")},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"port": HTTP_PORT, "protocol": "TCP"}]}],
        },
    }
