"""Reading, applying and deleting whole objects. Does I/O.

``apply_object`` is the write path of the reconciler: it creates what is missing, patches
only what differs (:mod:`tandem.kube.semantic`) with the live ``resourceVersion`` as a
precondition, and re-reads when that precondition fails or the object turns out to exist
already. A Deployment's controller writes its status many times a second while it
scales, and each write moves the ``resourceVersion``: conflicts are retried after a
growing pause (:data:`CONFLICT_BACKOFF_S`, client-go's ``retry.DefaultBackoff``), so a
busy controller is waited out rather than raced.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tandem.kube.client import MERGE_PATCH, KubeClient, KubeError
from tandem.kube.resources import ResourceType, resource_for
from tandem.kube.semantic import LAST_APPLIED_ANNOTATION as LAST_APPLIED
from tandem.kube.semantic import compute_apply_patch, with_last_applied

Verb = Literal["create", "patch", "unchanged"]

#: Pauses before the second, third... write after a conflict (seconds, each ±10 %).
CONFLICT_BACKOFF_S = (0.01, 0.05, 0.25, 1.25)


@dataclass(frozen=True)
class Applied:
    """What :func:`apply_object` did, and the object as the API server returned it."""

    verb: Verb
    object: dict[str, Any]
    #: Dotted paths the write changed (empty for a create or no write), for people.
    changed: tuple[str, ...] = ()


class NotOurs(Exception):
    """The object exists but belongs to someone else; Tandem leaves it alone."""

    def __init__(self, obj: Mapping[str, Any], why: str) -> None:
        meta = obj.get("metadata", {})
        super().__init__(f"{obj.get('kind')} {meta.get('namespace')}/{meta.get('name')}: {why}")
        self.object = obj
        self.why = why


def _identity(obj: Mapping[str, Any]) -> tuple[ResourceType, str | None, str]:
    meta = obj.get("metadata") or {}
    return resource_for(obj), meta.get("namespace"), str(meta.get("name"))


async def fetch_object(
    client: KubeClient, rtype: ResourceType, namespace: str | None, name: str
) -> dict[str, Any] | None:
    """The live object, or None when it does not exist."""
    try:
        return await client.request("GET", rtype.path(namespace, name))
    except KubeError as err:
        if err.not_found:
            return None
        raise


async def fetch_objects(
    client: KubeClient,
    rtype: ResourceType,
    namespace: str | None = None,
    label_selector: str | None = None,
) -> list[dict[str, Any]]:
    """Every object of ``rtype`` in ``namespace`` (all when None) matching the selector."""
    query = {"labelSelector": label_selector} if label_selector else None
    listing = await client.request("GET", rtype.path(namespace), query=query)
    items: list[dict[str, Any]] = listing.get("items") or []
    for item in items:
        item.setdefault("apiVersion", rtype.api_version)
        item.setdefault("kind", rtype.kind)
    return items


async def patch_annotations(
    client: KubeClient,
    rtype: ResourceType,
    namespace: str | None,
    name: str,
    annotations: Mapping[str, str | None],
) -> dict[str, Any]:
    """Set (or, with None, remove) annotations of one object; nothing else is written.

    A merge patch of ``metadata.annotations`` only, so it never conflicts with the
    object's controller (the autoscaler sets ``pod-deletion-cost`` on pods this way).
    Returns the object as stored; raises :class:`KubeError` (``not_found`` when gone).
    """
    body = {"metadata": {"annotations": dict(annotations)}}
    return await client.request(
        "PATCH", rtype.path(namespace, name), body=body, content_type=MERGE_PATCH
    )


async def apply_object(
    client: KubeClient,
    desired: Mapping[str, Any],
    live: Mapping[str, Any] | None = None,
    *,
    create_only: Mapping[str, Any] | None = None,
    check_owner: Callable[[Mapping[str, Any]], str | None] | None = None,
) -> Applied:
    """Make the object ``desired`` describes exist as described; write only differences.

    ``live`` is the caller's view of the object (None: believed absent); it may be stale.
    ``create_only`` is merged into the body of a create and never written afterwards
    (the first ``replicas`` of an autoscaled Deployment). ``check_owner`` returns why an
    existing object must not be taken over (:class:`NotOurs`), or None to proceed.
    """
    rtype, namespace, name = _identity(desired)
    current = None if live is None else dict(live)
    attempts = len(CONFLICT_BACKOFF_S) + 1
    for attempt in range(attempts):
        last = attempt == attempts - 1
        if current is None:
            body = with_last_applied(desired)
            for key, value in (create_only or {}).items():
                body[key] = {**body.get(key, {}), **copy.deepcopy(value)}
            try:
                created = await client.request("POST", rtype.path(namespace), body=body)
                return Applied("create", created)
            except KubeError as err:
                if not err.already_exists or last:
                    raise
            current = await fetch_object(client, rtype, namespace, name)
            continue
        why = check_owner(current) if check_owner is not None else None
        if why is not None:
            raise NotOurs(current, why)
        patch = compute_apply_patch(desired, current)
        if patch is None:
            return Applied("unchanged", current)
        patch["metadata"] = {
            **patch.get("metadata", {}),
            "resourceVersion": current["metadata"]["resourceVersion"],
        }
        try:
            patched = await client.request(
                "PATCH", rtype.path(namespace, name), body=patch, content_type=MERGE_PATCH
            )
            return Applied("patch", patched, changed_paths(patch))
        except KubeError as err:
            if not (err.conflict or err.not_found) or last:
                raise
            if err.conflict:
                await asyncio.sleep(CONFLICT_BACKOFF_S[attempt] * random.uniform(0.9, 1.1))
        current = await fetch_object(client, rtype, namespace, name)
    raise AssertionError("unreachable")


def changed_paths(patch: Mapping[str, Any], prefix: str = "", depth: int = 3) -> tuple[str, ...]:
    """``spec.template.spec``-style paths a merge patch touches, at most ``depth`` deep.

    >>> changed_paths({"metadata": {"resourceVersion": "7"}, "spec": {"replicas": 2}})
    ('spec.replicas',)
    """
    out: list[str] = []
    for key, value in patch.items():
        path = f"{prefix}{key}"
        if path in ("metadata.resourceVersion", f"metadata.annotations.{LAST_APPLIED}"):
            continue
        if isinstance(value, dict) and value and depth > 1:
            out += changed_paths(value, f"{path}.", depth - 1)
        elif path != "metadata.annotations" or value:
            out.append(path)
    return tuple(out)


async def delete_object(client: KubeClient, obj: Mapping[str, Any]) -> bool:
    """Delete ``obj`` if it is still the same object (uid precondition); False if gone."""
    rtype, namespace, name = _identity(obj)
    options: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": "Background",
    }
    uid = (obj.get("metadata") or {}).get("uid")
    if uid:
        options["preconditions"] = {"uid": uid}
    try:
        await client.request("DELETE", rtype.path(namespace, name), body=options)
    except KubeError as err:
        if err.not_found:
            return False
        raise
    return True
