"""Kubernetes Events about an object (what ``kubectl describe`` shows). Builds and posts.

``build_event`` is pure; ``post_event`` does the I/O. Events are ``core/v1`` Events named
``<object>.<nanoseconds in hex>`` as client-go names them, with ``source``,
``reportingComponent`` and ``reportingInstance`` so a person sees which operator replica
wrote them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from tandem.kube.client import KubeClient
from tandem.kube.resources import EVENT

EventType = Literal["Normal", "Warning"]
MAX_MESSAGE = 1024


def build_event(
    involved: Mapping[str, Any],
    *,
    type: EventType,
    reason: str,
    message: str,
    component: str,
    instance: str,
    now: datetime | None = None,
) -> dict[str, Any]:
    """A ``core/v1`` Event about ``involved`` (a whole object, or its reference)."""
    meta = involved.get("metadata") or {}
    when = now or datetime.now(UTC)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    name = str(meta.get("name"))
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name}.{time.time_ns() if now is None else int(when.timestamp() * 1e9):x}",
            "namespace": meta.get("namespace") or "default",
        },
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": name,
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": type,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


async def post_event(client: KubeClient, event: Mapping[str, Any]) -> dict[str, Any]:
    """Create ``event`` (from :func:`build_event`)."""
    namespace = (event.get("metadata") or {}).get("namespace")
    return await client.request("POST", EVENT.path(namespace), body=dict(event))
