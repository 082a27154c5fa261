"""``coordination.k8s.io/v1`` Leases, the lock leader election holds. Does I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tandem.kube.client import KubeClient
from tandem.kube.objects import fetch_object
from tandem.kube.resources import LEASE


async def fetch_lease(client: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The Lease, or None when it does not exist yet."""
    return await fetch_object(client, LEASE, namespace, name)


async def create_lease(
    client: KubeClient, namespace: str, name: str, spec: Mapping[str, Any]
) -> dict[str, Any]:
    """Create the Lease with ``spec``; a conflict (``already_exists``) means someone won."""
    body = {
        "apiVersion": LEASE.api_version,
        "kind": LEASE.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": dict(spec),
    }
    return await client.request("POST", LEASE.path(namespace), body=body)


async def replace_lease(
    client: KubeClient, lease: Mapping[str, Any], spec: Mapping[str, Any]
) -> dict[str, Any]:
    """Replace the Lease's spec, conditional on the ``resourceVersion`` it was read at."""
    meta = lease["metadata"]
    body = {
        "apiVersion": LEASE.api_version,
        "kind": LEASE.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "resourceVersion": meta["resourceVersion"],
        },
        "spec": dict(spec),
    }
    return await client.request("PUT", LEASE.path(meta["namespace"], meta["name"]), body=body)
