"""Conditional writes of an InferenceService's ``.status``, retried on conflict. Does I/O.

Two writers share ``.status``: the reconciler (readiness conditions, pool replicas) and
the autoscaler (desired replicas, decisions, its own conditions). A merge patch replaces
whole lists, the conditions among them, so each write is conditional on the version it
was computed from; on a conflict it is computed again from a fresh read, so neither
writer drops what the other wrote in between.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tandem.controller.cache import ObjectCache
from tandem.kube import INFERENCE_SERVICE, KubeClient, KubeError, fetch_object, patch_status

#: ``patch(current object) -> status patch``, or ``None`` when nothing needs writing.
ComputePatch = Callable[[Mapping[str, Any]], Mapping[str, Any] | None]


async def write_status(
    client: KubeClient,
    services: ObjectCache[Any, Any],
    body: Mapping[str, Any],
    compute: ComputePatch,
    *,
    attempts: int,
) -> Mapping[str, Any] | None:
    """Write ``compute(body)`` to ``.status`` conditionally, recomputing it from a fresh
    read after a conflict, at most ``attempts`` times. Returns the stored object, or
    ``None`` when nothing was written (nothing to write, or the object is gone); raises
    the last conflict or any other API error."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    current = body
    for attempt in range(attempts):
        patch = compute(current)
        if patch is None:
            return None
        try:
            stored = await patch_status(
                client,
                namespace,
                name,
                patch,
                resource_version=current["metadata"]["resourceVersion"],
            )
        except KubeError as err:
            if err.not_found:
                return None
            if not err.conflict or attempt + 1 == attempts:
                raise
            fresh = await fetch_object(client, INFERENCE_SERVICE, namespace, name)
            if fresh is None:
                return None
            services.observe(fresh)
            current = fresh
            continue
        services.observe(stored, written=True)
        return stored
    return None
