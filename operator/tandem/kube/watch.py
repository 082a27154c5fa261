"""List and watch: the objects of one query, kept current by a list and then a watch.
Does I/O (through :class:`~tandem.kube.client.KubeClient`).

The pattern every Kubernetes client follows: list once, watch from that list's
``resourceVersion``, and list again when the watch's version has expired (410 Gone) or
the connection failed, backing off between failures. Consumers get the whole list
(``on_list``) after each list and every event (``on_event``) after that, so they can
rebuild their state from either; nothing waits on the API server but this loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from tandem.kube.client import KubeClient, KubeError
from tandem.kube.resources import ResourceType

log = logging.getLogger("tandem.kube.watch")

#: Server-side watch timeout, seconds; the watch is renewed from its last resourceVersion.
WATCH_TIMEOUT_S = 300
#: Back-off after a failed list or watch: doubling from 0.5 s, at most 30 s.
BACKOFF_BASE_S, BACKOFF_MAX_S = 0.5, 30.0

OnList = Callable[[list[dict[str, Any]]], None]
OnEvent = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class Query:
    """Objects of one type in one namespace (None: all), optionally by selectors."""

    resource: ResourceType
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None

    def params(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.label_selector:
            out["labelSelector"] = self.label_selector
        if self.field_selector:
            out["fieldSelector"] = self.field_selector
        return out


async def list_objects(client: KubeClient, query: Query) -> tuple[list[dict[str, Any]], str | None]:
    """Every object the query matches, and the list's resourceVersion."""
    listing = await client.request(
        "GET", query.resource.path(query.namespace), query=query.params()
    )
    items: list[dict[str, Any]] = listing.get("items") or []
    rtype = query.resource
    for item in items:
        item.setdefault("apiVersion", rtype.api_version)
        item.setdefault("kind", rtype.kind)
    version = (listing.get("metadata") or {}).get("resourceVersion")
    return items, None if version is None else str(version)


async def watch_objects(
    client: KubeClient,
    query: Query,
    resource_version: str | None,
    timeout_s: float = WATCH_TIMEOUT_S,
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """``(type, object)`` of each event after ``resource_version``, bookmarks included,
    until the server ends the watch. An ``ERROR`` event (a 410 when the version expired)
    raises :class:`KubeError` with its code, so the caller lists again."""
    params = {
        **query.params(),
        "watch": "true",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(max(1, round(timeout_s))),
    }
    if resource_version is not None:
        params["resourceVersion"] = resource_version
    path = query.resource.path(query.namespace)
    async for event in client.stream(path, query=params, timeout_s=timeout_s + 30):
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(kind, str) or not isinstance(obj, dict):
            raise ValueError(f"malformed watch event: {str(event)[:200]}")
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            raise KubeError(code, str(obj.get("reason") or ""), str(obj.get("message") or ""))
        yield kind, obj


class ListWatch:
    """One query listed, then watched forever: :meth:`relist` once, then :meth:`run`."""

    def __init__(
        self,
        client: KubeClient,
        query: Query,
        on_list: OnList,
        on_event: OnEvent,
        *,
        watch_timeout_s: float = WATCH_TIMEOUT_S,
    ) -> None:
        self.client = client
        self.query = query
        self.on_list = on_list
        self.on_event = on_event
        self.watch_timeout_s = watch_timeout_s
        self.resource_version: str | None = None

    async def relist(self) -> None:
        """List the query's objects and hand them to ``on_list``; raises on failure."""
        items, self.resource_version = await list_objects(self.client, self.query)
        self.on_list(items)

    async def run(self) -> None:
        """Watch forever; after a failure back off, list again, and watch again."""
        attempt = 0
        while True:
            try:
                async for kind, obj in watch_objects(
                    self.client, self.query, self.resource_version, self.watch_timeout_s
                ):
                    version = (obj.get("metadata") or {}).get("resourceVersion")
                    if version is not None:
                        self.resource_version = str(version)
                    if kind != "BOOKMARK":
                        self.on_event(kind, obj)
                attempt = 0
                continue  # the server ended the watch: renew it from the last version
            except KubeError as err:
                if err.status != 410:
                    log.warning("watch of %s failed: %s", self.query.resource.plural, err)
            except (OSError, TimeoutError, ValueError) as err:
                log.warning("watch of %s failed: %s: %s", self.query.resource.plural,
                            type(err).__name__, err)  # fmt: skip
            await asyncio.sleep(backoff_s(attempt))
            attempt += 1
            try:
                await self.relist()
            except (KubeError, OSError, TimeoutError) as err:
                log.warning("re-list of %s failed: %s", self.query.resource.plural, err)


def backoff_s(attempt: int) -> float:
    """Seconds to wait after ``attempt`` consecutive failures.

    >>> [backoff_s(n) for n in (0, 1, 2, 10)]
    [0.5, 1.0, 2.0, 30.0]
    """
    return float(min(BACKOFF_BASE_S * 2 ** min(attempt, 10), BACKOFF_MAX_S))
