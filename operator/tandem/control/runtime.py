"""What one operator holds while it leads: caches, work queue, reconciler, tickers. I/O
only through its parts (the client, the event recorder, the reconciler).

The Kopf handlers (:mod:`tandem.control.handlers`) only feed this object: every watch
event of an InferenceService or of a child updates a cache and queues the owning
service, unless the event merely echoes the operator's own last write. A periodic resync
queues every service again (a level-based safety net; it writes nothing when nothing
drifted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from tandem.control.children import ServiceKey, child_key, owner_key
from tandem.control.metrics import OperatorMetrics
from tandem.control.reconcile import ChildCache, Reconciler, ServiceCache
from tandem.controller.cache import ObjectCache
from tandem.controller.events import EventRecorder
from tandem.controller.ticker import Tickers
from tandem.controller.workqueue import WorkQueue
from tandem.kube import KubeClient

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
    ) -> None:
        self.client = client
        self.metrics = metrics
        self.identity = identity
        self.resync_interval_s = resync_interval_s
        self.services: ServiceCache = ObjectCache(service_key, service_key)
        self.children: ChildCache = ObjectCache(child_key, owner_key)
        self.events = EventRecorder(client, metrics, instance=identity, dedupe_s=event_dedupe_s)
        self.reconciler = Reconciler(client, self.services, self.children, self.events, metrics)
        self.queue: WorkQueue[ServiceKey] = WorkQueue(
            self._process, workers=workers, base_delay_s=retry_base_s, max_delay_s=retry_max_s
        )
        self.tickers = Tickers(self, metrics)
        self._resync: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.events.start()
        await self.queue.start()
        self._resync = asyncio.create_task(self._resync_loop(), name="resync")

    async def stop(self) -> None:
        """Stop writing at once: tickers and reconciles first, then flush the Events."""
        await self.tickers.stop_all()
        if self._resync is not None:
            self._resync.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._resync
        await self.queue.stop()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await self.events.drain()
        await self.events.stop()

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
