"""Writing the ``status`` subresource of an InferenceService. Does I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tandem.kube.client import MERGE_PATCH, KubeClient
from tandem.kube.resources import INFERENCE_SERVICE, ResourceType


async def patch_status(
    client: KubeClient,
    namespace: str,
    name: str,
    status_patch: Mapping[str, Any],
    *,
    resource_version: str | None = None,
    rtype: ResourceType = INFERENCE_SERVICE,
) -> dict[str, Any]:
    """Merge-patch ``.status`` with ``status_patch`` (``None`` values remove keys).

    ``resource_version`` makes it conditional (a conflict when the object changed since
    it was read), so a writer that replaces a list — the conditions — cannot drop
    another writer's entries. Returns the object as stored.
    """
    body: dict[str, Any] = {"status": dict(status_patch)}
    if resource_version is not None:
        body["metadata"] = {"resourceVersion": resource_version}
    return await client.request(
        "PATCH", rtype.path(namespace, name, "status"), body=body, content_type=MERGE_PATCH
    )
