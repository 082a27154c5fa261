"""Where the engines are: a static list, or the Kubernetes API (watched). Does I/O.

Static discovery sets the pools once from the command line. Kubernetes discovery reads
the router's config from its InferenceService and keeps the pools equal to the ready
pods of the service's pools: one list, then a watch from that list's resourceVersion,
re-listing when the watch expires (410 Gone) or the connection fails. Requests never
wait on the API server; they read the pools the watch keeps current.

The client is ``kubernetes_asyncio``: it is asyncio-native (no thread pool inside the
router's event loop, unlike the official ``kubernetes`` client), generated from the
same OpenAPI spec (core pods and custom objects with one API), handles in-cluster
service-account credentials and kubeconfig alike, and is already a dependency of the
operator, so the router adds nothing to the image.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from tandem.api import GROUP, PLURAL, VERSION
from tandem.api.validate import SpecError, load_inference_service
from tandem.manifests.meta import SERVICE_LABEL
from tandem.router.config import RouterConfig, build_router_config
from tandem.router.pods import PodTable
from tandem.router.state import Router

log = logging.getLogger("tandem.router.discovery")

#: Server-side watch timeout; the watch is renewed from its last resourceVersion.
WATCH_TIMEOUT_S = 300
#: Client-side bound on one list request.
LIST_TIMEOUT_S = 30.0


def _watch_args(resource_version: str | None) -> dict[str, Any]:
    """Query of a watch from ``resource_version``.

    ``watch`` is the string ``"true"`` (what kubectl sends) rather than Python's
    ``True``, which the client would render as ``True`` in the query.
    """
    args: dict[str, Any] = {
        "watch": "true",
        "allow_watch_bookmarks": "true",
        "timeout_seconds": WATCH_TIMEOUT_S,
        "_preload_content": False,
        "_request_timeout": WATCH_TIMEOUT_S + 30,
    }
    if resource_version is not None:
        args["resource_version"] = resource_version
    return args


#: Back-off after a failed list or watch: doubling from 0.5 s, at most 30 s.
BACKOFF_BASE_S, BACKOFF_MAX_S = 0.5, 30.0
#: How long startup keeps trying to read the InferenceService before giving up.
STARTUP_DEADLINE_S = 60.0


class Discovery(Protocol):
    """Fills a router's pools: ``start`` before serving, ``run`` as a background task."""

    async def start(self, router: Router) -> None: ...

    async def run(self, router: Router) -> None: ...

    async def close(self) -> None: ...


@dataclass
class StaticDiscovery:
    """Fixed URLs per role, from ``--prefill``/``--decode`` or ``--pool``."""

    urls_by_role: dict[str, list[str]]

    async def start(self, router: Router) -> None:
        for role, urls in self.urls_by_role.items():
            router.set_pool_urls(role, urls)

    async def run(self, router: Router) -> None:
        return None

    async def close(self) -> None:
        return None


async def load_kube_configuration() -> client.Configuration:
    """In-cluster service-account credentials, else the kubeconfig (``KUBECONFIG``)."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        await config.load_kube_config(client_configuration=configuration)
    return configuration


@dataclass
class KubeDiscovery:
    """The pools and config of InferenceService ``service`` in ``namespace``."""

    namespace: str
    service: str
    base: RouterConfig = field(default_factory=RouterConfig)
    """Settings the InferenceService does not carry (scrape interval, affinity)."""
    configuration: client.Configuration | None = None
    """API server and credentials; ``None``: in-cluster, else the kubeconfig."""
    _api: client.ApiClient | None = None
    _table: PodTable | None = None
    _pods_version: str | None = None
    _isvc_version: str | None = None

    @property
    def api(self) -> client.ApiClient:
        if self._api is None:
            raise RuntimeError("KubeDiscovery.start() was not called")
        return self._api

    async def start(self, router: Router) -> None:
        """Read the config and the ready pods once; raise if the API stays unreachable."""
        configuration = self.configuration or await load_kube_configuration()
        self._api = client.ApiClient(configuration)
        self._table = PodTable(self.service)
        loop = asyncio.get_running_loop()
        deadline, attempt = loop.time() + STARTUP_DEADLINE_S, 0
        while True:
            try:
                await self._relist_service(router, strict=True)
                await self._relist_pods(router)
                return
            except (ApiException, aiohttp.ClientError, OSError, LookupError, SpecError) as err:
                if loop.time() >= deadline:
                    raise RuntimeError(
                        f"cannot read InferenceService {self.namespace}/{self.service}: {err}"
                    ) from err
                log.warning("reading %s/%s failed: %s", self.namespace, self.service, err)
                await asyncio.sleep(_backoff_s(attempt))
                attempt += 1

    async def run(self, router: Router) -> None:
        await asyncio.gather(
            self._follow(router, self._watch_pods, self._relist_pods),
            self._follow(router, self._watch_service, self._relist_service),
        )

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()

    async def _follow(
        self,
        router: Router,
        watch_once: Callable[[Router], Awaitable[None]],
        relist: Callable[[Router], Awaitable[None]],
    ) -> None:
        """Watch forever; after a failure back off, re-list, and watch again."""
        attempt = 0
        while True:
            try:
                await watch_once(router)
                attempt = 0
                continue
            except ApiException as err:
                if err.status != 410:
                    log.warning("watch failed: %s %s", err.status, err.reason)
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as err:
                log.warning("watch failed: %s: %s", type(err).__name__, err)
            await asyncio.sleep(_backoff_s(attempt))
            attempt += 1
            try:
                await relist(router)
            except (ApiException, aiohttp.ClientError, OSError, LookupError) as err:
                log.warning("re-list failed: %s", err)

    # pods

    async def _relist_pods(self, router: Router) -> None:
        core = client.CoreV1Api(self.api)
        resp = await core.list_namespaced_pod(
            self.namespace,
            label_selector=self._selector(),
            _preload_content=False,
            _request_timeout=LIST_TIMEOUT_S,
        )
        listing = await _json(resp)
        self._pods_version = listing.get("metadata", {}).get("resourceVersion")
        table = self._pod_table()
        table.reset(listing.get("items") or [])
        self._publish(router, table)

    async def _watch_pods(self, router: Router) -> None:
        core = client.CoreV1Api(self.api)
        table = self._pod_table()
        resp = await core.list_namespaced_pod(
            self.namespace,
            label_selector=self._selector(),
            **_watch_args(self._pods_version),
        )
        async for kind, obj in _events(resp):
            self._pods_version = obj.get("metadata", {}).get("resourceVersion")
            if kind != "BOOKMARK":
                table.apply_event(kind, obj)
                self._publish(router, table)

    def _publish(self, router: Router, table: PodTable) -> None:
        by_role = table.urls_by_role()
        for role in router.roles():
            router.set_pool_urls(role, by_role[role])

    # the InferenceService

    async def _relist_service(self, router: Router, *, strict: bool = False) -> None:
        custom = client.CustomObjectsApi(self.api)
        resp = await custom.list_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            field_selector=f"metadata.name={self.service}",
            _preload_content=False,
            _request_timeout=LIST_TIMEOUT_S,
        )
        listing = await _json(resp)
        self._isvc_version = listing.get("metadata", {}).get("resourceVersion")
        items = [i for i in listing.get("items") or [] if _name_of(i) == self.service]
        if not items:
            raise LookupError(f"InferenceService {self.namespace}/{self.service} not found")
        self._apply_service(router, items[0], strict=strict)

    async def _watch_service(self, router: Router) -> None:
        custom = client.CustomObjectsApi(self.api)
        resp = await custom.list_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            field_selector=f"metadata.name={self.service}",
            **_watch_args(self._isvc_version),
        )
        async for kind, obj in _events(resp):
            self._isvc_version = obj.get("metadata", {}).get("resourceVersion")
            if kind in ("ADDED", "MODIFIED") and _name_of(obj) == self.service:
                self._apply_service(router, obj, strict=False)

    def _apply_service(self, router: Router, obj: dict[str, Any], *, strict: bool) -> None:
        """Adopt the resource's router settings; a bad edit keeps the last good ones."""
        manifest = {k: v for k, v in obj.items() if k != "status"}
        try:
            isvc = load_inference_service(manifest)
        except SpecError as err:
            if strict:
                raise
            log.error("ignoring invalid %s/%s: %s", self.namespace, self.service, err)
            return
        router.set_config(build_router_config(isvc, self.base))
        if self._table is not None:
            self._publish(router, self._table)  # the mode, hence the roles, may have changed

    def _pod_table(self) -> PodTable:
        if self._table is None:
            raise RuntimeError("KubeDiscovery.start() was not called")
        return self._table

    def _selector(self) -> str:
        return f"{SERVICE_LABEL}={self.service}"


async def _events(resp: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """``(type, object)`` of each line of a watch response; ``ERROR`` events raise.

    An expired resourceVersion arrives as an ``ERROR`` event with a 410 Status, raised
    as :class:`ApiException` so the caller re-lists.
    """
    try:
        async for line in resp.content:
            if not line.strip():
                continue
            event = json.loads(line)
            kind, obj = event.get("type"), event.get("object")
            if not isinstance(kind, str) or not isinstance(obj, dict):
                raise ValueError(f"malformed watch event: {line[:200]!r}")
            if kind == "ERROR":
                raise ApiException(status=obj.get("code"), reason=obj.get("message"))
            yield kind, obj
    finally:
        resp.release()


async def _json(resp: Any) -> dict[str, Any]:
    try:
        data: Any = json.loads(await resp.read())
    finally:
        resp.release()
    return data if isinstance(data, dict) else {}


def _name_of(obj: dict[str, Any]) -> str | None:
    name = (obj.get("metadata") or {}).get("name")
    return name if isinstance(name, str) else None


def _backoff_s(attempt: int) -> float:
    return float(min(BACKOFF_BASE_S * 2 ** min(attempt, 10), BACKOFF_MAX_S))
