"""The ``scale`` subresource: how the autoscaler reads and sets a pool's replicas. Does I/O.

Writing through ``/scale`` touches nothing but ``spec.replicas`` (the reconciler never
writes it while autoscaling is on), so the two writers never fight over a field.
"""

from __future__ import annotations

from typing import Any

from tandem.kube.client import MERGE_PATCH, KubeClient
from tandem.kube.resources import DEPLOYMENT, ResourceType


async def fetch_scale(
    client: KubeClient, namespace: str, name: str, *, rtype: ResourceType = DEPLOYMENT
) -> dict[str, Any]:
    """The ``autoscaling/v1`` Scale of a Deployment (``spec.replicas``, ``status``)."""
    return await client.request("GET", rtype.path(namespace, name, "scale"))


async def patch_scale(
    client: KubeClient,
    namespace: str,
    name: str,
    replicas: int,
    *,
    resource_version: str | None = None,
    rtype: ResourceType = DEPLOYMENT,
) -> dict[str, Any]:
    """Set ``spec.replicas`` of a Deployment to ``replicas``; returns the new Scale.

    With ``resource_version`` the write fails with a conflict (:class:`KubeError`,
    ``.conflict``) if the Deployment changed since it was read.
    """
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    body: dict[str, Any] = {"spec": {"replicas": replicas}}
    if resource_version is not None:
        body["metadata"] = {"resourceVersion": resource_version}
    return await client.request(
        "PATCH", rtype.path(namespace, name, "scale"), body=body, content_type=MERGE_PATCH
    )
