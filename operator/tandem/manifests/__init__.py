"""Pure builders: an InferenceService and its owner → every child manifest as a dict.

``build_children`` is all the operator needs; the ``build_*`` functions of the modules
below build one child each. Nothing here reads from the API or the filesystem.
"""

from __future__ import annotations

from typing import Any

from tandem.api import InferenceService
from tandem.manifests.engine import autoscaled, build_engine_deployment
from tandem.manifests.meta import Owner, child_name
from tandem.manifests.monitoring import build_monitors
from tandem.manifests.network import (
    NetworkPeers,
    build_engine_service,
    build_network_policy,
    build_pdb,
    build_router_network_policy,
)
from tandem.manifests.router import (
    build_router_deployment,
    build_router_rbac,
    build_router_service,
    router_url,
)


def build_children(
    isvc: InferenceService, owner: Owner, peers: NetworkPeers | None = None
) -> list[dict[str, Any]]:
    """Every child of ``isvc``, in the order a person would create them; ``peers``: where
    the operator and Prometheus run (their pods may reach the engines)."""
    roles = list(isvc.spec.pools())
    children: list[dict[str, Any]] = [*build_router_rbac(isvc, owner)]
    for role in roles:
        children += [
            build_engine_deployment(isvc, owner, role),
            build_engine_service(isvc, owner, role),
            build_pdb(isvc, owner, role),
        ]
    children += [
        build_router_deployment(isvc, owner),
        build_router_service(isvc, owner),
        build_pdb(isvc, owner, "router"),
        build_network_policy(isvc, owner, roles, peers),
        build_router_network_policy(isvc, owner, peers),
        *build_monitors(isvc, owner, roles),
    ]
    return children


def build_initial_replicas(isvc: InferenceService) -> dict[str, int]:
    """Deployment name → replicas to create an autoscaled pool with (``replicas.initial``)."""
    return {child_name(isvc, role): pool.replicas.start for role, pool in isvc.spec.pools().items()}


__all__ = [
    "NetworkPeers",
    "Owner",
    "autoscaled",
    "build_children",
    "build_initial_replicas",
    "router_url",
]
