"""The emulated API's verbs on stored objects: list, create, update, scale, delete.

No network I/O: each function takes the parsed request parts and the :class:`Store`, and
returns the answer body or raises :class:`ApiError` — following the API conventions
(https://kubernetes.io/docs/reference/using-api/api-concepts/) described in
:mod:`tests.support.kube_emulator`.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import uuid
from collections.abc import Mapping
from typing import Any

import kmock

from tests.support.kube_semantics import (
    MERGE_PATCH,
    ApiError,
    apply_patch,
    format_selector,
    generate_name,
    now_rfc3339,
    parse_field_selector,
    parse_label_selector,
)
from tests.support.kube_store import Key, Store

#: Metadata only the server sets; writes cannot change it.
SERVER_META = (
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "name",
    "namespace",
)


@dataclasses.dataclass(frozen=True)
class ScalePaths:
    """Where a resource keeps what its ``scale`` subresource shows (dotted paths)."""

    spec_replicas: str = "spec.replicas"
    status_replicas: str = "status.replicas"
    selector: str = "spec.selector"


def api_version_of(res: kmock.resource) -> str:
    return f"{res.group}/{res.version}" if res.group else str(res.version)


def get_path(obj: dict[str, Any], path: str) -> Any:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        obj = obj.setdefault(part, {})
    obj[leaf] = value


def list_objects(
    store: Store,
    res: kmock.resource,
    info: kmock.ResourceInfo,
    namespace: str | None,
    params: Mapping[str, str],
) -> dict[str, Any]:
    labels = parse_label_selector(params.get("labelSelector"))
    fields = parse_field_selector(params.get("fieldSelector"))
    items = [
        obj
        for (_, ns, _), obj in store.items(res)
        if namespace in (None, ns)
        and labels(obj.get("metadata", {}).get("labels") or {})
        and fields(obj)
    ]
    items.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
    return {
        "apiVersion": api_version_of(res),
        "kind": f"{info.kind}List",
        "metadata": {"resourceVersion": str(store.revision)},
        "items": items,
    }


def create(
    store: Store,
    rng: random.Random,
    body: Any,
    res: kmock.resource,
    info: kmock.ResourceInfo,
    namespace: str | None,
) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body must be a JSON object")
    api_version = api_version_of(res)
    if body.get("kind") not in (None, info.kind) or body.get("apiVersion") not in (
        None,
        api_version,
    ):
        raise ApiError(
            400,
            "BadRequest",
            f"the body is a {body.get('kind')} of "
            f"{body.get('apiVersion')}; the URL is for {info.kind} {api_version}",
        )
    obj = copy.deepcopy(body)
    meta = obj.setdefault("metadata", {})
    if info.namespaced and meta.get("namespace") not in (None, "", namespace):
        raise ApiError(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
        )
    ns = namespace if info.namespaced else None
    name = meta.get("name") or ""
    while not name:
        if not meta.get("generateName"):
            raise ApiError(
                422, "Invalid", "metadata.name: Required value: name or generateName is required"
            )
        name = generate_name(meta["generateName"], rng)
        name = "" if store.current((res, ns, name)) is not None else name
    key: Key = (res, ns, name)
    if store.current(key) is not None:
        raise ApiError(
            409,
            "AlreadyExists",
            f'{res.plural} "{name}" already exists',
            name=name,
            group=res.group,
            kind=res.plural,
        )
    for field in (*SERVER_META, "resourceVersion", "managedFields"):
        meta.pop(field, None)
    if "status" in info.subresources:
        obj.pop("status", None)
    meta.update(
        name=name,
        uid=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        creationTimestamp=now_rfc3339(),
        generation=1,
        resourceVersion=store.bump(),
    )
    if ns is not None:
        meta["namespace"] = ns
    obj = {"apiVersion": api_version, "kind": info.kind, **obj}
    store.add(key, obj)
    return obj


def check_preconditions(cur: dict[str, Any], rv: Any, uid: Any) -> None:
    meta = cur["metadata"]
    if rv not in (None, "") and str(rv) != meta["resourceVersion"]:
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on "{meta["name"]}": '
            "the object has been modified; please apply your changes to the "
            "latest version and try again",
        )
    if uid not in (None, "") and uid != meta.get("uid"):
        raise ApiError(
            409,
            "Conflict",
            f"Precondition failed: UID in precondition: {uid}, "
            f"UID in object meta: {meta.get('uid')}",
        )


def incoming(cur: dict[str, Any], method: str, body: Any, content_type: str) -> dict[str, Any]:
    """The object a PATCH or PUT asks for, after checking its preconditions."""
    if method == "PATCH":
        wanted = apply_patch(cur, body, content_type)
    elif isinstance(body, dict):
        wanted = copy.deepcopy(body)
    else:
        raise ApiError(400, "BadRequest", "the request body must be a JSON object")
    found = wanted.get("metadata")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    if method == "PUT" and meta.get("name") not in (None, cur["metadata"]["name"]):
        raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
    check_preconditions(cur, meta.get("resourceVersion"), meta.get("uid"))
    return wanted


def settle(
    cur: dict[str, Any], wanted: dict[str, Any], info: kmock.ResourceInfo, subresource: str | None
) -> dict[str, Any]:
    """What is stored for a write of ``wanted``: server fields and subresource rules."""
    if subresource == "status":
        new = copy.deepcopy(cur)
        new.pop("status", None)
        if wanted.get("status") is not None:
            new["status"] = copy.deepcopy(wanted["status"])
        return new
    new = copy.deepcopy(wanted)
    new["apiVersion"], new["kind"] = cur["apiVersion"], cur["kind"]
    meta = new["metadata"] = dict(new.get("metadata") or {})
    for field in SERVER_META:
        meta.pop(field, None)
        if field in cur["metadata"]:
            meta[field] = cur["metadata"][field]
    meta["resourceVersion"] = cur["metadata"]["resourceVersion"]
    if "status" in info.subresources:
        new.pop("status", None)
        if "status" in cur:
            new["status"] = copy.deepcopy(cur["status"])
    content = {k: v for k, v in new.items() if k not in ("metadata", "status")}
    if content != {k: v for k, v in cur.items() if k not in ("metadata", "status")}:
        meta["generation"] = int(meta.get("generation") or 0) + 1
    return new


def update(
    store: Store,
    key: Key,
    info: kmock.ResourceInfo,
    method: str,
    body: Any,
    content_type: str,
    subresource: str | None,
) -> dict[str, Any]:
    cur = store.require(key)
    wanted = incoming(cur, method, body, content_type)
    return store.commit(key, cur, settle(cur, wanted, info, subresource))


def patch_in_process(
    store: Store, key: Key, info: kmock.ResourceInfo, patch: dict[str, Any], subresource: str | None
) -> dict[str, Any]:
    """A merge patch from inside the test (a stand-in controller), same rules as HTTP."""
    cur = store.require(key)
    new = settle(cur, apply_patch(cur, patch, MERGE_PATCH), info, subresource)
    return store.commit(key, cur, new)


def scale_view(obj: dict[str, Any], paths: ScalePaths) -> dict[str, Any]:
    meta = obj["metadata"]
    replicas = get_path(obj, paths.spec_replicas)
    selector = get_path(obj, paths.selector)
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {} if replicas is None else {"replicas": replicas},
        "status": {
            "replicas": get_path(obj, paths.status_replicas) or 0,
            "selector": selector if isinstance(selector, str) else format_selector(selector),
        },
    }


def scale(
    store: Store,
    key: Key,
    info: kmock.ResourceInfo,
    paths: ScalePaths,
    method: str,
    body: Any,
    content_type: str,
) -> dict[str, Any]:
    cur = store.require(key)
    if method in ("PATCH", "PUT"):
        wanted = incoming(scale_view(cur, paths), method, body, content_type)
        replicas = (wanted.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError(
                422,
                "Invalid",
                f"spec.replicas: Invalid value: {replicas!r}: must be greater than or equal to 0",
            )
        new = copy.deepcopy(cur)
        set_path(new, paths.spec_replicas, replicas)
        cur = store.commit(key, cur, settle(cur, new, info, None))
    elif method != "GET":
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on scale")
    return scale_view(cur, paths)


def delete(store: Store, key: Key, options: Any) -> dict[str, Any]:
    cur = store.require(key)
    pre = (options.get("preconditions") or {}) if isinstance(options, dict) else {}
    check_preconditions(cur, pre.get("resourceVersion"), pre.get("uid"))
    if cur["metadata"].get("finalizers"):
        new = copy.deepcopy(cur)
        new["metadata"].setdefault("deletionTimestamp", now_rfc3339())
        new["metadata"].setdefault("deletionGracePeriodSeconds", 0)
        return store.commit(key, cur, new)
    store.remove(key, cur)
    res = key[0]
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": key[2],
            "group": res.group,
            "kind": res.plural,
            "uid": cur["metadata"].get("uid"),
        },
    }
