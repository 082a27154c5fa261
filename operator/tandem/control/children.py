"""Which objects belong to which InferenceService, and which of them are stale. Pure.

A child belongs to the InferenceService named by its *controller* ownerReference (the
one ``kubectl get`` and the garbage collector follow). An object with no controller but
Tandem's labels for that service (``app.kubernetes.io/managed-by: tandem``,
``serving.tandem.dev/service: <name>``) is adopted; anything else with a child's name is
left alone and reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tandem.api import GROUP, KIND
from tandem.controller.cache import ObjectKey
from tandem.manifests.meta import SERVICE_LABEL

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "tandem"
#: Only children Tandem manages are watched (server-side selection keeps the operator's
#: memory proportional to its own objects, not to every Deployment in the cluster).
CHILD_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
ChildKey = tuple[str, str, str | None, str]  # apiVersion, kind, namespace, name
ServiceKey = ObjectKey  # of an InferenceService


def child_key(obj: Mapping[str, Any]) -> ChildKey:
    meta = obj.get("metadata") or {}
    return (
        str(obj.get("apiVersion")),
        str(obj.get("kind")),
        meta.get("namespace"),
        str(meta.get("name")),
    )


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def _is_ours(ref: Mapping[str, Any]) -> bool:
    return ref.get("kind") == KIND and str(ref.get("apiVersion", "")).split("/")[0] == GROUP


def owner_key(obj: Mapping[str, Any]) -> ServiceKey | None:
    """The InferenceService (namespace, name) that controls ``obj``, or would adopt it."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    if namespace is None:
        return None
    ref = controller_of(obj)
    if ref is not None:
        return (namespace, str(ref.get("name"))) if _is_ours(ref) else None
    labels = meta.get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(SERVICE_LABEL):
        return namespace, labels[SERVICE_LABEL]
    return None


def make_owner_check(name: str, uid: str) -> Callable[[Mapping[str, Any]], str | None]:
    """Why an existing object may not be taken over by InferenceService ``name``/``uid``
    (None: it is ours, or an orphan labelled for us)."""

    def check(obj: Mapping[str, Any]) -> str | None:
        ref = controller_of(obj)
        if ref is not None:
            if _is_ours(ref) and ref.get("uid") == uid:
                return None
            return (
                f"already controlled by {ref.get('kind')} {ref.get('name')} (uid {ref.get('uid')})"
            )
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(SERVICE_LABEL) == name:
            return None
        return "exists and is not managed by Tandem; delete or rename it"

    return check


def compute_stale(
    desired: Iterable[Mapping[str, Any]], live: Iterable[Mapping[str, Any]], owner_uid: str
) -> list[Mapping[str, Any]]:
    """Live children controlled by ``owner_uid`` that the desired state no longer has."""
    wanted = {child_key(d) for d in desired}
    return [
        obj
        for obj in live
        if child_key(obj) not in wanted
        and (ref := controller_of(obj)) is not None
        and _is_ours(ref)
        and ref.get("uid") == owner_uid
    ]
