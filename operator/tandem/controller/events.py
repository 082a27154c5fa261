"""Posting Events about InferenceServices in the background. Does I/O (through tandem.kube).

Recording an Event never blocks or fails a reconcile: events are queued and posted by a
few workers, retried a few times. An Event the API server could not take because it did
not answer (an outage, throttling) is kept, repeats counted, at most ``max_pending`` of
them, and posted once the API answers again, marked as late. On stop the recorder tries
once more for a bounded time; what is still undelivered is written to ``spool_path``
(an ``emptyDir`` survives the container's restart) and posted by the next process, or
logged one line each: an operator that dies of an outage loses nothing silently. The
same message about the same object is posted once per ``dedupe_s`` (a failing reconcile
retried with backoff does not flood ``kubectl describe``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tandem.controller.metrics import ControllerMetrics
from tandem.kube import KubeClient, KubeError, build_event, post_event
from tandem.kube.events import EventType

logger = logging.getLogger(__name__)
RETRY_DELAYS_S = (0.5, 1.0, 2.0)
#: At most this many recent messages are remembered for deduplication.
MAX_REMEMBERED = 50_000
#: Pause between two attempts to post the Events kept while the API did not answer.
REDELIVER_S = 2.0
#: An Event posted this long after it was recorded says so in its message.
LATE_S = 5.0


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
        max_pending: int = 1000,
        spool_path: str | None = None,
    ) -> None:
        self.max_pending = max_pending
        self.spool_path = Path(spool_path) if spool_path else None
        #: Events kept while the API did not answer, by (uid, type, reason, message).
        self._pending: collections.OrderedDict[tuple[Any, ...], dict[str, Any]] = (
            collections.OrderedDict()
        )
        #: When a previous process found the API down as it stopped (from the spool).
        self.spooled_outage_start: datetime | None = None
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
        event = build_event(
            involved,
            type=type,
            reason=reason,
            message=message,
            component=self.component,
            instance=self.instance,
        )
        event["_recorded_at"] = time.time()  # never posted (fields with _ are stripped)
        self._queue.put_nowait(event)

    async def drain(self) -> None:
        """Wait until every recorded Event was posted, kept for later or dropped."""
        await self._queue.join()

    @property
    def pending(self) -> int:
        """Events kept until the API answers again."""
        return len(self._pending)

    async def start(self) -> None:
        self._load_spool()
        self._tasks = [
            asyncio.create_task(self._work(), name=f"events-{i}") for i in range(self._workers)
        ]
        self._tasks.append(asyncio.create_task(self._redeliver_loop(), name="events-redeliver"))

    async def flush(self, timeout_s: float) -> None:
        """Post what is queued and kept, for at most ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self.drain()
                await self._redeliver()

    async def stop(self, *, outage_start: datetime | None = None) -> None:
        """Stop posting; spool (or log) what is still undelivered. ``outage_start``: the
        API has not answered since then (the next process reports it)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        while not self._queue.empty():
            self._hold(self._queue.get_nowait())
            self._queue.task_done()
        self._save_spool(outage_start)

    async def _work(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._post(event)
            finally:
                self._queue.task_done()

    async def _post(self, event: dict[str, Any]) -> None:
        for delay in (*RETRY_DELAYS_S, None):
            try:
                await self._send(event)
                return
            except KubeError as err:
                if not err.transient:
                    self._drop(event, "rejected", err)
                    return
                if delay is None:
                    self._hold(event)  # the API does not answer: post it once it does
                    return
                await asyncio.sleep(delay)

    async def _send(self, event: dict[str, Any]) -> None:
        late_s = time.time() - float(event.get("_recorded_at", time.time()))
        body = {k: v for k, v in event.items() if not k.startswith("_")}
        if late_s > LATE_S:
            body["message"] = (
                f"{body['message']} (recorded {body['firstTimestamp']}, posted "
                f"{late_s:.0f} s late: the API server did not answer)"
            )
            body["lastTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            await post_event(self._client, body)
        except KubeError as err:
            if not err.already_exists:  # a lost reply to an earlier attempt: delivered
                raise
        self._metrics.events.labels(event["type"], event["reason"]).inc()

    def _hold(self, event: dict[str, Any]) -> None:
        key = _key(event)
        kept = self._pending.get(key)
        if kept is not None:
            kept["count"] = int(kept.get("count", 1)) + 1
            return
        self._pending[key] = event
        while len(self._pending) > self.max_pending:
            _, oldest = self._pending.popitem(last=False)
            self._drop(oldest, "overflow", None)

    def _drop(self, event: Mapping[str, Any], why: str, err: Exception | None) -> None:
        self._metrics.events_dropped.labels(why).inc()
        logger.warning(
            "dropping Event %s %s %s/%s (%s): %s%s",
            event["type"],
            event["reason"],
            event["involvedObject"].get("namespace"),
            event["involvedObject"].get("name"),
            why,
            event["message"],
            f": {err}" if err is not None else "",
        )

    async def _redeliver_loop(self) -> None:
        while True:
            await asyncio.sleep(REDELIVER_S)
            await self._redeliver()

    async def _redeliver(self) -> None:
        """Post the kept Events, oldest first, until the API fails to answer again."""
        for key in list(self._pending):
            event = self._pending.get(key)
            if event is None:
                continue
            try:
                await self._send(event)
            except KubeError as err:
                if err.transient:
                    return
                self._drop(event, "rejected", err)
            self._pending.pop(key, None)

    def _save_spool(self, outage_start: datetime | None) -> None:
        events = list(self._pending.values())
        self._pending.clear()
        if not events and outage_start is None:
            return
        if self.spool_path is None:
            for event in events:
                self._drop(event, "stopped", None)
            return
        record = {
            "outageStart": outage_start.isoformat() if outage_start else None,
            "events": events[-self.max_pending :],
        }
        tmp = self.spool_path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(record))
            os.replace(tmp, self.spool_path)
        except OSError as err:
            logger.warning("cannot spool %d Events to %s: %s", len(events), self.spool_path, err)
            for event in events:
                self._drop(event, "stopped", None)
            return
        logger.info("spooled %d undelivered Events to %s", len(events), self.spool_path)

    def _load_spool(self) -> None:
        path = self.spool_path
        if path is None or not path.exists():
            return
        try:
            record = json.loads(path.read_text())
            path.unlink()
        except (OSError, ValueError) as err:
            logger.warning("ignoring the Event spool %s: %s", path, err)
            return
        start = record.get("outageStart") if isinstance(record, dict) else None
        if isinstance(start, str):
            with contextlib.suppress(ValueError):
                self.spooled_outage_start = datetime.fromisoformat(start)
        events = record.get("events") if isinstance(record, dict) else None
        for event in events if isinstance(events, list) else []:
            if isinstance(event, dict) and isinstance(event.get("involvedObject"), dict):
                self._hold(event)


def _key(event: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        (event.get("involvedObject") or {}).get("uid"),
        event.get("type"),
        event.get("reason"),
        event.get("message"),
    )
