"""Where the engines are: a static list, or the Kubernetes API (watched). Does I/O
(through :mod:`tandem.kube`).

Static discovery sets the pools once from the command line. Kubernetes discovery reads
the router's config from its InferenceService and keeps the pools equal to the ready
pods of the service's pools, each through a :class:`~tandem.kube.watch.ListWatch` (one
list, then a watch from that list's resourceVersion, re-listing when it expires or
fails). Requests never wait on the API server; they read the pools the watches keep
current. Turning pod events into pools is pure (:mod:`tandem.router.pods`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from tandem.api.validate import SpecError, load_inference_service
from tandem.kube import INFERENCE_SERVICE, POD, KubeClient, KubeError
from tandem.kube.watch import ListWatch, Query, backoff_s, list_objects
from tandem.manifests.meta import SERVICE_LABEL
from tandem.router.config import RouterConfig, build_router_config
from tandem.router.pods import PodTable
from tandem.router.state import Router

log = logging.getLogger("tandem.router.discovery")

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


@dataclass
class KubeDiscovery:
    """The pools and config of InferenceService ``service`` in ``namespace``."""

    namespace: str
    service: str
    base: RouterConfig = field(default_factory=RouterConfig)
    """Settings the InferenceService does not carry (scrape interval, affinity)."""
    client: KubeClient | None = None
    """The API client; ``None``: in-cluster credentials, else the kubeconfig."""
    _owns_client: bool = False
    _table: PodTable | None = None
    _watches: list[ListWatch] = field(default_factory=list)

    async def start(self, router: Router) -> None:
        """Read the config and the ready pods once; raise if the API stays unreachable."""
        if self.client is None:
            self.client = await KubeClient.from_environment(user_agent="tandem-router")
            self._owns_client = True
        table = self._table = PodTable(self.service)

        def on_pods(items: list[dict[str, Any]]) -> None:
            table.reset(items)
            self._publish(router)

        def on_pod_event(kind: str, obj: dict[str, Any]) -> None:
            table.apply_event(kind, obj)
            self._publish(router)

        pods = Query(POD, self.namespace, label_selector=f"{SERVICE_LABEL}={self.service}")
        services = Query(
            INFERENCE_SERVICE, self.namespace, field_selector=f"metadata.name={self.service}"
        )
        service_watch = ListWatch(
            self.client,
            services,
            lambda items: self._on_services(router, items, strict=False),
            lambda kind, obj: self._on_service_event(router, kind, obj),
        )
        pod_watch = ListWatch(self.client, pods, on_pods, on_pod_event)
        self._watches = [pod_watch, service_watch]
        loop = asyncio.get_running_loop()
        deadline, attempt = loop.time() + STARTUP_DEADLINE_S, 0
        while True:
            try:
                items, version = await list_objects(self.client, services)
                self._on_services(router, items, strict=True)  # a bad spec fails startup
                service_watch.resource_version = version
                await pod_watch.relist()
                return
            except (KubeError, OSError, TimeoutError, LookupError, SpecError) as err:
                if loop.time() >= deadline:
                    raise RuntimeError(
                        f"cannot read InferenceService {self.namespace}/{self.service}: {err}"
                    ) from err
                log.warning("reading %s/%s failed: %s", self.namespace, self.service, err)
                await asyncio.sleep(backoff_s(attempt))
                attempt += 1

    async def run(self, router: Router) -> None:
        await asyncio.gather(*(watch.run() for watch in self._watches))

    async def close(self) -> None:
        if self._owns_client and self.client is not None:
            await self.client.close()

    def _publish(self, router: Router) -> None:
        if self._table is None:
            return
        by_role = self._table.urls_by_role()
        for role in router.roles():
            router.set_pool_urls(role, by_role[role])

    def _on_services(self, router: Router, items: list[dict[str, Any]], *, strict: bool) -> None:
        mine = [i for i in items if _name_of(i) == self.service]
        if not mine:
            if strict:
                raise LookupError(f"InferenceService {self.namespace}/{self.service} not found")
            log.warning("InferenceService %s/%s not found", self.namespace, self.service)
            return
        self._apply_service(router, mine[0], strict=strict)

    def _on_service_event(self, router: Router, kind: str, obj: dict[str, Any]) -> None:
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
        self._publish(router)  # the mode, hence the roles, may have changed


def _name_of(obj: dict[str, Any]) -> str | None:
    name = (obj.get("metadata") or {}).get("name")
    return name if isinstance(name, str) else None
