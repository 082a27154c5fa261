"""Prometheus Operator objects: a ServiceMonitor for the router, a PodMonitor for engines. Pure."""

from __future__ import annotations

from typing import Any

from tandem.api import InferenceService
from tandem.api.durations import format_duration
from tandem.build.meta import (
    ROLE_LABEL,
    SERVICE_LABEL,
    Owner,
    child_name,
    metadata,
    selector_labels,
)

API_VERSION = "monitoring.coreos.com/v1"


def build_monitors(isvc: InferenceService, owner: Owner, roles: list[str]) -> list[dict[str, Any]]:
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
                    "endpoints": [{"port": "http", "path": "/metrics", "interval": interval}],
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
                        {"port": "http", "path": "/metrics", "interval": interval}
                    ],
                },
            }
        )
    return out
