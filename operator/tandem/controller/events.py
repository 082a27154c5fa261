"""Posting Events about InferenceServices in the background. Does I/O (through tandem.kube).

Recording an Event never blocks or fails a reconcile: events are queued and posted by a
few workers, retried a few times on API errors, then dropped with a log line and a
metric. The same message about the same object is posted once per ``dedupe_s`` (a
failing reconcile retried with backoff does not flood ``kubectl describe``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from tandem.controller.metrics import ControllerMetrics
from tandem.kube import KubeClient, KubeError, build_event, post_event
from tandem.kube.events import EventType

logger = logging.getLogger(__name__)
RETRY_DELAYS_S = (0.5, 1.0, 2.0)
#: At most this many recent messages are remembered for deduplication.
MAX_REMEMBERED = 50_000


class EventRecorder:
    """Queues Events and posts them with ``workers`` background tasks."""

    def __init__(
        self,
        client: KubeClient,
        metrics: ControllerMetrics,
        *,
        instance: str,
        component: str = "tandem-operator",
        dedupe_s: float = 300.0,
        workers: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._metrics = metrics
        self.instance = instance
        self.component = component
        self.dedupe_s = dedupe_s
        self._workers = workers
        self._clock = clock
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        #: (object uid, type, reason, message) -> when last posted, oldest first.
        self._recent: collections.OrderedDict[tuple[Any, ...], float] = collections.OrderedDict()
        self._tasks: list[asyncio.Task[None]] = []

    def record(
        self,
        involved: Mapping[str, Any],
        type: EventType,
        reason: str,
        message: str,
        *,
        dedupe: bool = True,
    ) -> None:
        """Post an Event about ``involved`` soon (unless posted within ``dedupe_s``;
        ``dedupe=False`` for facts that each deserve one, such as a scaling change)."""
        uid = (involved.get("metadata") or {}).get("uid")
        key = (uid, type, reason, message)
        now = self._clock()
        last = self._recent.get(key)
        if dedupe and last is not None and now - last < self.dedupe_s:
            return
        self._recent[key] = now
        self._recent.move_to_end(key)
        while self._recent:
            oldest, when = next(iter(self._recent.items()))
            if now - when < self.dedupe_s and len(self._recent) <= MAX_REMEMBERED:
                break
            del self._recent[oldest]
        self._queue.put_nowait(
            build_event(
                involved,
                type=type,
                reason=reason,
                message=message,
                component=self.component,
                instance=self.instance,
            )
        )

    async def drain(self) -> None:
        """Wait until every recorded Event was posted or dropped."""
        await self._queue.join()

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._work(), name=f"events-{i}") for i in range(self._workers)
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _work(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._post(event)
            finally:
                self._queue.task_done()

    async def _post(self, event: dict[str, Any]) -> None:
        for attempt, delay in enumerate((*RETRY_DELAYS_S, None)):
            try:
                await post_event(self._client, event)
                self._metrics.events.labels(event["type"], event["reason"]).inc()
                return
            except KubeError as err:
                if delay is None or not err.transient:
                    logger.warning(
                        "dropping Event %s %s after %d attempts: %s",
                        event["reason"],
                        event["involvedObject"]["name"],
                        attempt + 1,
                        err,
                    )
                    return
                await asyncio.sleep(delay)
