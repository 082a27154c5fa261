"""Watch streams of the emulated API. Does network I/O (writes the stream).

A watch is a chunked ``application/json`` response of newline-separated events.
Semantics (https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):
without ``resourceVersion`` (or with "0") the current objects come first as ADDED; with
one, every later change is replayed, or a 410 ``Expired`` ERROR event when the history no
longer reaches back that far; ``timeoutSeconds`` ends the stream; ``sendInitialEvents``
ends the initial state with a BOOKMARK. For a watch with a label selector, a change that
makes an object match is ADDED and one that makes it stop matching is DELETED, as the
API server's watch cache reports them.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp.web
import kmock

from tests.support.kube_semantics import ApiError, parse_field_selector, parse_label_selector
from tests.support.kube_store import Store, Subscriber
from tests.support.kube_verbs import api_version_of


class Filter:
    """Which objects one watch sees."""

    def __init__(self, namespace: str | None, name: str | None, params: Mapping[str, str]):
        self.namespace = namespace
        self.name = name
        self.labels: Callable[[Mapping[str, str]], bool] = parse_label_selector(
            params.get("labelSelector")
        )
        self.fields = parse_field_selector(params.get("fieldSelector"))

    def wants(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata", {})
        return (
            self.namespace in (None, meta.get("namespace"))
            and self.name in (None, meta.get("name"))
            and self.labels(meta.get("labels") or {})
            and self.fields(obj)
        )

    def translate(self, kind: str, old: Any, new: dict[str, Any]) -> dict[str, Any] | None:
        """The event this watch sees for a change, if any."""
        if kind != "MODIFIED":
            return {"type": kind, "object": new} if self.wants(new) else None
        was, now = self.wants(old), self.wants(new)
        if was and now:
            return {"type": "MODIFIED", "object": new}
        if now:
            return {"type": "ADDED", "object": new}
        if was:
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = new["metadata"]["resourceVersion"]
            return {"type": "DELETED", "object": gone}
        return None


def backlog(
    store: Store,
    res: kmock.resource,
    info: kmock.ResourceInfo,
    seen: Filter,
    params: Mapping[str, str],
) -> tuple[list[dict[str, Any]], bool]:
    """Events to send before live ones, and whether the stream ends right after them."""
    since = params.get("resourceVersion") or ""
    initial = params.get("sendInitialEvents") == "true"
    if since in ("", "0") or initial:
        events = [
            {"type": "ADDED", "object": obj}
            for _, obj in sorted(store.items(res))
            if seen.wants(obj)
        ]
        if initial:
            events.append(
                {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": info.kind,
                        "apiVersion": api_version_of(res),
                        "metadata": {
                            "resourceVersion": str(store.revision),
                            "annotations": {"k8s.io/initial-events-end": "true"},
                        },
                    },
                }
            )
        return events, False
    if not since.isdigit():
        raise ApiError(400, "BadRequest", f"invalid resourceVersion {since!r}")
    if int(since) < store.floor:
        expired = ApiError(
            410, "Expired", f"too old resource version: {since} ({store.floor + 1})"
        ).status()
        return [{"type": "ERROR", "object": expired}], True
    events = []
    for rv, r, kind, old, new in store.events:
        if r == res and rv > int(since) and (event := seen.translate(kind, old, new)):
            events.append(event)
    return events, False


def parse_timeout_seconds(value: str) -> float:
    """``timeoutSeconds`` as the API server reads it: a whole number, else 400.

    >>> parse_timeout_seconds("300")
    300.0
    >>> parse_timeout_seconds("300.0")
    Traceback (most recent call last):
    ...
    tests.support.kube_semantics.ApiError: strconv.ParseInt: parsing "300.0": invalid syntax
    """
    try:
        return float(int(value, 10))
    except ValueError:
        raise ApiError(
            400, "BadRequest", f'strconv.ParseInt: parsing "{value}": invalid syntax'
        ) from None


async def serve_watch(
    store: Store,
    res: kmock.resource,
    info: kmock.ResourceInfo,
    namespace: str | None,
    name: str | None,
    params: Mapping[str, str],
    raw: aiohttp.web.BaseRequest,
    default_timeout_s: float | None,
) -> aiohttp.web.StreamResponse:
    seen = Filter(namespace, name, params)
    first, done = backlog(store, res, info, seen, params)
    timeout = (
        parse_timeout_seconds(params["timeoutSeconds"])
        if "timeoutSeconds" in params
        else (default_timeout_s if default_timeout_s is not None else math.inf)
    )
    sub = Subscriber(res, wakeup=asyncio.Event())
    store.subscribers.add(sub)
    response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    try:
        await response.prepare(raw)
        for event in first:
            await response.write(json.dumps(event).encode() + b"\n")
        if not done:
            await _stream(sub, seen, response, raw, timeout)
    except (ConnectionResetError, RuntimeError):
        sub.abort = True
    finally:
        store.subscribers.discard(sub)
    if sub.abort:
        if raw.transport is not None:
            raw.transport.close()
    else:
        await response.write_eof()
    return response


async def _stream(
    sub: Subscriber,
    seen: Filter,
    response: aiohttp.web.StreamResponse,
    raw: aiohttp.web.BaseRequest,
    timeout_s: float,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    assert sub.wakeup is not None
    while (left := deadline - loop.time()) > 0:
        while sub.queue:
            item = sub.queue.popleft()
            if item is None:
                return
            event = seen.translate(*item)
            if event is not None:
                await response.write(json.dumps(event).encode() + b"\n")
        sub.wakeup.clear()
        try:
            async with asyncio.timeout(min(left, 1.0)):
                await sub.wakeup.wait()
        except TimeoutError:
            if raw.transport is None or raw.transport.is_closing():
                return
