"""The Kubernetes resource types Tandem reads and writes, and their URL paths. Pure.

A manifest names its type by ``apiVersion`` and ``kind``; the API addresses it by group,
version and plural. :func:`resource_for` maps one to the other for every kind the
builders emit, so nothing else in the package spells a URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tandem.api import GROUP, KIND, PLURAL, VERSION


@dataclass(frozen=True)
class ResourceType:
    """One resource of the Kubernetes API (``apps/v1`` ``deployments``)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        """``/apis/apps/v1/namespaces/ns/deployments/name/scale`` and its shorter forms."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


SERVICE_ACCOUNT = ResourceType("", "v1", "serviceaccounts", "ServiceAccount")
SERVICE = ResourceType("", "v1", "services", "Service")
EVENT = ResourceType("", "v1", "events", "Event")
POD = ResourceType("", "v1", "pods", "Pod")
ROLE = ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDING = ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")
POD_DISRUPTION_BUDGET = ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
NETWORK_POLICY = ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
SERVICE_MONITOR = ResourceType("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor")
POD_MONITOR = ResourceType("monitoring.coreos.com", "v1", "podmonitors", "PodMonitor")
LEASE = ResourceType("coordination.k8s.io", "v1", "leases", "Lease")
INFERENCE_SERVICE = ResourceType(GROUP, VERSION, PLURAL, KIND)

#: Every kind an InferenceService owns (what the operator watches for drift).
CHILD_TYPES: tuple[ResourceType, ...] = (
    SERVICE_ACCOUNT,
    ROLE,
    ROLE_BINDING,
    DEPLOYMENT,
    SERVICE,
    POD_DISRUPTION_BUDGET,
    NETWORK_POLICY,
    SERVICE_MONITOR,
    POD_MONITOR,
)

_BY_KIND: dict[tuple[str, str], ResourceType] = {
    (t.api_version, t.kind): t for t in (*CHILD_TYPES, EVENT, LEASE, POD, INFERENCE_SERVICE)
}


def resource_for(obj: Mapping[str, Any]) -> ResourceType:
    """The resource type of a manifest, from its ``apiVersion`` and ``kind``."""
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    try:
        return _BY_KIND[key]
    except KeyError:
        raise KeyError(f"no resource known for apiVersion={key[0]} kind={key[1]}") from None
