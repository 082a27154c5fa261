"""Pods of a service's pools → the endpoint URLs the router may use. Pure.

A pod is an endpoint when it carries the service and an engine role label, is not
being deleted, has an IP and its ``Ready`` condition is ``True`` (an engine's readiness
probe passes only once its weights are loaded and it answers ``/health``). The watch
loop in :mod:`tandem.router.discovery` folds list results and watch events into a
:class:`PodTable` with these functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tandem.manifests.meta import ENGINE_ROLES, ROLE_LABEL, SERVICE_LABEL
from tandem.manifests.meta import HTTP_PORT as DEFAULT_PORT


def compute_pod_endpoint(pod: Mapping[str, Any], service: str) -> tuple[str, str] | None:
    """``(role, url)`` of a ready engine pod of ``service``; ``None`` for any other pod."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    role = labels.get(ROLE_LABEL)
    if labels.get(SERVICE_LABEL) != service or role not in ENGINE_ROLES:
        return None
    address = compute_pod_address(pod)
    if address is None:
        return None
    ip, port = address
    host = f"[{ip}]" if ":" in ip else ip
    return role, f"http://{host}:{port}"


def compute_pod_address(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(pod IP, port of the container port named http)`` of a pod that may serve now:
    not being deleted, ``Running``, with an IP and its ``Ready`` condition ``True``;
    ``None`` for any other pod. The autoscaler scrapes exactly these pods."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    status = pod.get("status") or {}
    ip = status.get("podIP")
    if not ip or status.get("phase") != "Running":
        return None
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    if not ready:
        return None
    return str(ip), _http_port(pod)


def _http_port(pod: Mapping[str, Any]) -> int:
    """The container port named ``http`` (engines serve on 8000 unless told otherwise)."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        for port in container.get("ports") or ():
            if port.get("name") == "http" and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    return DEFAULT_PORT


@dataclass
class PodTable:
    """Endpoint of every pod seen, by pod name (``None``: not an endpoint right now)."""

    service: str
    endpoints: dict[str, tuple[str, str] | None] = field(default_factory=dict)

    def reset(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """Replace everything with a fresh list result."""
        self.endpoints = {_name(p): compute_pod_endpoint(p, self.service) for p in pods}

    def apply_event(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """Fold one watch event (``ADDED``, ``MODIFIED``, ``DELETED``) in."""
        name = _name(pod)
        if event_type == "DELETED":
            self.endpoints.pop(name, None)
        elif event_type in ("ADDED", "MODIFIED"):
            self.endpoints[name] = compute_pod_endpoint(pod, self.service)

    def urls_by_role(self) -> dict[str, list[str]]:
        """Sorted endpoint URLs of each engine role (every role present, maybe empty)."""
        out: dict[str, list[str]] = {role: [] for role in ENGINE_ROLES}
        for entry in self.endpoints.values():
            if entry is not None:
                out[entry[0]].append(entry[1])
        return {role: sorted(set(urls)) for role, urls in out.items()}


def _name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
