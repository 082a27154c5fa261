"""Prometheus Operator objects: a ServiceMonitor for the router, a PodMonitor for engines. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tandem.api import InferenceService
from tandem.api.durations import format_duration
from tandem.api.vocab import PoolRole
from tandem.manifests.meta import (
    ROLE_LABEL,
    SERVICE_LABEL,
    Owner,
    child_name,
    metadata,
    selector_labels,
)

API_VERSION = "monitoring.coreos.com/v1"


def _relabelings(pool: str | None) -> list[dict[str, Any]]:
    """Add the ``service`` and ``pool`` labels alerts, dashboards and the Prometheus
    metrics source select by (docs/metrics.md), from the pods' Tandem labels."""
    out: list[dict[str, Any]] = [
        {
            "sourceLabels": ["__meta_kubernetes_pod_label_serving_tandem_dev_service"],
            "targetLabel": "service",
        },
    ]
    if pool is None:
        out.append(
            {
                "sourceLabels": ["__meta_kubernetes_pod_label_serving_tandem_dev_role"],
                "targetLabel": "pool",
            }
        )
    else:
        out.append({"targetLabel": "pool", "replacement": pool})
    return out


def build_monitors(
    isvc: InferenceService, owner: Owner, roles: Sequence[PoolRole]
) -> list[dict[str, Any]]:
    """The monitors ``spec.monitoring`` asks for (none by default)."""
    mon = isvc.spec.monitoring
    interval = format_duration(mon.interval)
    out: list[dict[str, Any]] = []
    if mon.service_monitor:
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ServiceMonitor",
                "metadata": metadata(isvc, owner, child_name(isvc, "router"), "router"),
                "spec": {
                    "selector": {"matchLabels": selector_labels(isvc, "router")},
                    "endpoints": [
                        {
                            "port": "http",
                            "path": "/metrics",
                            "interval": interval,
                            # tandem_router_inflight carries its own pool label: keep it.
                            "honorLabels": True,
                            "relabelings": _relabelings("router"),
                        }
                    ],
                },
            }
        )
    if mon.pod_monitor:
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "PodMonitor",
                "metadata": metadata(isvc, owner, child_name(isvc, "engines"), "engines"),
                "spec": {
                    "selector": {
                        "matchLabels": {SERVICE_LABEL: isvc.name},
                        "matchExpressions": [
                            {"key": ROLE_LABEL, "operator": "In", "values": roles}
                        ],
                    },
                    "podMetricsEndpoints": [
                        {
                            "port": "http",
                            "path": "/metrics",
                            "interval": interval,
                            "relabelings": _relabelings(None),
                        }
                    ],
                },
            }
        )
    return out
