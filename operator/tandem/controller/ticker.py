"""Periodic work per watched object (the autoscaler's tick). No API I/O of its own.

A :class:`Tickers` runs, for every managed InferenceService, one task per registered
ticker that calls ``fn(TickContext)`` every ``interval_s(body)`` seconds (None: this
service gets no ticks). A tick holds the service's work-queue lock, so it never runs
concurrently with that service's reconcile; ticks stop when the service is deleted and
run only on the leader (the whole runtime does). Nothing is stored in memory across ticks
that a restart would lose: state belongs in ``.status`` (level-based reconcile).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tandem.controller.cache import ObjectKey
from tandem.controller.metrics import ControllerMetrics

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TickContext:
    """What a tick sees: the service's latest body and its children (from the caches)."""

    key: ObjectKey
    body: Mapping[str, Any]
    children: list[dict[str, Any]]
    runtime: Any = field(repr=False)
    """The runtime that runs the tick: its client, caches and event recorder."""


TickFn = Callable[[TickContext], Awaitable[None]]
IntervalFn = Callable[[Mapping[str, Any]], float | None]
ForgetFn = Callable[[ObjectKey], None]
CloseFn = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class _Ticker:
    name: str
    interval_s: IntervalFn
    fn: TickFn
    forget: ForgetFn | None = None
    close: CloseFn | None = None


class Tickers:
    """Registered tickers and their running tasks per service."""

    def __init__(self, runtime: Any, metrics: ControllerMetrics) -> None:
        self._runtime = runtime
        self._metrics = metrics
        self._tickers: list[_Ticker] = []
        self._tasks: dict[tuple[str, ObjectKey], asyncio.Task[None]] = {}

    def add(
        self,
        name: str,
        interval_s: IntervalFn,
        fn: TickFn,
        *,
        forget: ForgetFn | None = None,
        close: CloseFn | None = None,
    ) -> None:
        """Register a ticker before the operator starts (e.g. the autoscaler).

        ``forget(key)`` runs when a service is deleted (drop what the ticker keeps for
        it); ``close()`` when the runtime stops, after every tick task has ended.
        """
        self._tickers.append(_Ticker(name, interval_s, fn, forget, close))

    def ensure(self, key: ObjectKey) -> None:
        """Make sure every ticker runs for ``key`` (idempotent)."""
        for ticker in self._tickers:
            task = self._tasks.get((ticker.name, key))
            if task is None or task.done():
                self._tasks[ticker.name, key] = asyncio.create_task(
                    self._run(ticker, key), name=f"tick-{ticker.name}-{key[0]}/{key[1]}"
                )

    def stop(self, key: ObjectKey) -> None:
        """The service is gone: cancel its ticks and let each ticker forget it."""
        for ticker in self._tickers:
            task = self._tasks.pop((ticker.name, key), None)
            if task is not None:
                task.cancel()
            if ticker.forget is not None:
                try:
                    ticker.forget(key)
                except Exception:
                    logger.exception("ticker %s could not forget %s/%s", ticker.name, *key)

    async def stop_all(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ticker in self._tickers:
            if ticker.close is not None:
                try:
                    await ticker.close()
                except Exception:
                    logger.exception("ticker %s did not close cleanly", ticker.name)

    def running(self, key: ObjectKey) -> list[str]:
        return [name for (name, k), t in self._tasks.items() if k == key and not t.done()]

    async def _run(self, ticker: _Ticker, key: ObjectKey) -> None:
        runtime = self._runtime
        while True:
            body = runtime.services.get(key)
            if body is None:
                return
            interval = ticker.interval_s(body)
            await asyncio.sleep(interval if interval is not None else 30.0)
            body = runtime.services.get(key)
            if body is None:
                return
            if interval is None or (body.get("metadata") or {}).get("deletionTimestamp"):
                continue
            async with runtime.queue.locks[key]:
                context = TickContext(key, body, runtime.children.in_group(key), runtime)
                try:
                    await ticker.fn(context)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    self._metrics.tick_errors.labels(ticker.name).inc()
                    logger.exception("tick %s of %s/%s failed", ticker.name, *key)
