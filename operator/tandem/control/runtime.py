"""What one operator holds while it leads: caches, work queue, reconciler, tickers. I/O
only through its parts (the client, the event recorder, the reconciler, the watches).

InferenceServices are listed and watched here (:meth:`Runtime.watch_services`, through
:class:`tandem.kube.watch.ListWatch`, whose decoding bounds nesting: one object nested
thousands of levels deep is reported on itself, not fatal to every tenant's watch), after
one list of every child kind, so a restarted operator knows every existing child before
its first reconcile. Kopf's handlers (:mod:`tandem.control.handlers`) feed the children's
events. Every event updates a cache and queues the owning service, unless it merely
echoes the operator's own last write. A periodic resync queues every service again (a
level-based safety net; it writes nothing when nothing drifted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tandem.control.children import CHILD_SELECTOR, ServiceKey, child_key, owner_key
from tandem.control.metrics import OperatorMetrics
from tandem.control.reconcile import ChildCache, Reconciler, ServiceCache
from tandem.control.restrictions import Restrictions
from tandem.controller.availability import ApiAvailability, Outage
from tandem.controller.cache import ObjectCache
from tandem.controller.events import EventRecorder
from tandem.controller.ticker import Tickers
from tandem.controller.workqueue import WorkQueue
from tandem.kube import CHILD_TYPES, INFERENCE_SERVICE, KubeClient, KubeError, fetch_objects
from tandem.kube.watch import ListWatch, Query, backoff_s
from tandem.manifests.network import NetworkPeers

logger = logging.getLogger(__name__)


def service_key(obj: Mapping[str, Any]) -> ServiceKey:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


class Runtime:
    """The operator's state and workers; :meth:`start` them, :meth:`stop` them."""

    def __init__(
        self,
        client: KubeClient,
        metrics: OperatorMetrics,
        *,
        identity: str,
        workers: int = 16,
        resync_interval_s: float = 600.0,
        event_dedupe_s: float = 300.0,
        retry_base_s: float = 0.5,
        retry_max_s: float = 300.0,
        restrictions: Restrictions | None = None,
        peers: NetworkPeers | None = None,
        availability: ApiAvailability | None = None,
        event_spool: str | None = None,
        event_flush_s: float = 5.0,
    ) -> None:
        self.availability = availability or ApiAvailability()
        self.event_flush_s = event_flush_s
        self.restrictions = restrictions or Restrictions()
        self.client = client
        self.metrics = metrics
        self.identity = identity
        self.resync_interval_s = resync_interval_s
        self.services: ServiceCache = ObjectCache(service_key, service_key)
        self.children: ChildCache = ObjectCache(child_key, owner_key)
        self.events = EventRecorder(
            client, metrics, instance=identity, dedupe_s=event_dedupe_s, spool_path=event_spool
        )
        self.reconciler = Reconciler(
            client,
            self.services,
            self.children,
            self.events,
            metrics,
            restrictions=self.restrictions,
            peers=peers,
        )
        self.queue: WorkQueue[ServiceKey] = WorkQueue(
            self._process, workers=workers, base_delay_s=retry_base_s, max_delay_s=retry_max_s
        )
        self.tickers = Tickers(self, metrics)
        self._resync: asyncio.Task[None] | None = None
        self._watches: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self.events.start()
        await self.queue.start()
        self._resync = asyncio.create_task(self._resync_loop(), name="resync")

    def watch_services(
        self, namespaces: tuple[str, ...] | list[str], *, watch_timeout_s: float = 300.0
    ) -> None:
        """List the children, then list and watch InferenceServices in ``namespaces`` (all
        when empty), in background tasks that :meth:`stop` ends."""
        scopes: list[str | None] = list(namespaces) or [None]
        self._watches = [
            asyncio.create_task(self._watch(ns, watch_timeout_s), name=f"watch-services-{ns}")
            for ns in scopes
        ]

    async def stop(self) -> None:
        """Stop writing at once: tickers and reconciles first, then flush the Events."""
        for task in self._watches:
            task.cancel()
        await asyncio.gather(*self._watches, return_exceptions=True)
        self._watches = []
        await self.tickers.stop_all()
        if self._resync is not None:
            self._resync.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._resync
        await self.queue.stop()
        await self.events.flush(self.event_flush_s)
        await self.events.stop(outage_start=self.availability.down_since)

    def report_outage(self, outage: Outage) -> None:
        """Say on every service that the API server was away (once it answers again):
        for that long nothing was reconciled, scaled or reported."""
        self.metrics.api_outages.inc()
        message = (
            f"{outage.describe()}: reconciles, autoscaling and Events waited meanwhile "
            "and resume now"
        )
        logger.warning("%s", message)
        for key in list(self.services):
            body = self.services.get(key)
            if body is not None:
                self.events.record(body, "Warning", "APIUnavailable", message, dedupe=False)

    # ------------------------------------------------------------ fed by Kopf handlers

    def on_service_event(self, kind: str | None, obj: Mapping[str, Any]) -> None:
        key = service_key(obj)
        if kind == "DELETED":
            self.services.forget(obj)
            self.queue.discard(key)
            self.tickers.stop(key)
        elif not self.services.is_echo(obj):
            self.services.observe(obj)
            self.queue.add(key)
            self.tickers.ensure(key)
        self.metrics.managed_services.set(len(self.services))

    def observe_child(self, obj: Mapping[str, Any]) -> None:
        """Index-time update (before any reconcile runs at startup): no queueing."""
        self.children.observe(obj)

    def on_child_event(self, kind: str | None, obj: Mapping[str, Any]) -> None:
        echo = kind != "DELETED" and self.children.is_echo(obj)
        if kind == "DELETED":
            self.children.forget(obj)
        else:
            self.children.observe(obj)
        owner = owner_key(obj)
        if not echo and owner is not None and self.services.get(owner) is not None:
            self.queue.add(owner)

    # ------------------------------------------------------------ the service watch

    async def _watch(self, namespace: str | None, watch_timeout_s: float) -> None:
        await self._retry(lambda: self._list_children(namespace), "children")
        watch = ListWatch(
            self.client,
            Query(INFERENCE_SERVICE, namespace),
            lambda items: self._on_service_list(namespace, items),
            self._on_watched_service,
            watch_timeout_s=watch_timeout_s,
        )
        await self._retry(watch.relist, "InferenceServices")
        await watch.run()

    async def _retry(self, step: Any, what: str) -> None:
        """Run ``step`` until it succeeds, backing off between failures."""
        attempt = 0
        while True:
            try:
                await step()
                return
            except (KubeError, OSError, TimeoutError, ValueError) as err:
                logger.warning("listing %s failed, will retry: %s", what, err)
            await asyncio.sleep(backoff_s(attempt))
            attempt += 1

    async def _list_children(self, namespace: str | None) -> None:
        for rtype in CHILD_TYPES:
            try:
                items = await fetch_objects(self.client, rtype, namespace, CHILD_SELECTOR)
            except KubeError as err:
                if err.not_found:  # an optional kind (monitors) whose CRD is not installed
                    continue
                raise
            for item in items:
                self.children.observe(item)

    def _on_service_list(self, namespace: str | None, items: list[dict[str, Any]]) -> None:
        listed = {service_key(item) for item in items}
        for key in list(self.services):
            body = self.services.get(key)
            if (namespace is None or key[0] == namespace) and key not in listed and body:
                self._on_watched_service("DELETED", body)  # deleted while not watching
        for item in items:
            self._on_watched_service("ADDED", item)
        # A previous process stopped while the API did not answer: say so now, on every
        # service (they are known from this list).
        start, self.events.spooled_outage_start = self.events.spooled_outage_start, None
        if start is not None:
            self.report_outage(Outage(start, datetime.now(UTC)))

    def _on_watched_service(self, kind: str, obj: dict[str, Any]) -> None:
        try:
            self.on_service_event(kind, obj)
        except Exception:  # one odd object must not end the watch of every other
            self.metrics.reconciles.labels("error").inc()
            logger.exception("dropping a %s event of an InferenceService", kind)

    # ------------------------------------------------------------ internals

    async def _process(self, key: ServiceKey) -> float | None:
        self.metrics.queue_depth.set(self.queue.depth)
        return await self.reconciler.reconcile(key)

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resync_interval_s)
            keys = list(self.services)
            logger.debug("resync of %d InferenceServices", len(keys))
            for key in keys:
                self.queue.add(key)

    def idle(self) -> bool:
        """Nothing queued or running (retries scheduled for later do not count)."""
        return not self.queue.busy
