"""A work queue of keys with coalescing, per-key serialization and retry backoff. No API I/O.

The controller-runtime pattern: any number of triggers (watch events of the resource and
of its children, resyncs) ``add`` a key; a key waiting in the queue is there once; a key
being processed is processed by one worker at a time and, if triggered meanwhile, once
more right after. A failure is retried after ``base_delay_s * 2**(failures-1)`` seconds
(with ±10% jitter, at most ``max_delay_s``), so one broken resource cannot starve the
others or hammer the API server.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
logger = logging.getLogger(__name__)


class WorkQueue(Generic[K]):
    """``process(key)`` returns None when done, seconds to run again later, or raises."""

    def __init__(
        self,
        process: Callable[[K], Awaitable[float | None]],
        *,
        workers: int = 16,
        base_delay_s: float = 0.5,
        max_delay_s: float = 300.0,
        seed: int | None = None,
    ) -> None:
        self._process = process
        self._workers = workers
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self._ready: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._timers: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self.failures: dict[K, int] = {}
        self.locks: collections.defaultdict[K, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        self._tasks: list[asyncio.Task[None]] = []
        self._rng = random.Random(seed)

    @property
    def depth(self) -> int:
        """Keys waiting to be processed now (not those delayed for a retry)."""
        return len(self._queued)

    @property
    def busy(self) -> bool:
        return bool(self._queued or self._processing)

    def add(self, key: K, delay_s: float = 0.0) -> None:
        """Process ``key`` (again) after ``delay_s`` seconds; duplicates coalesce."""
        if delay_s > 0:
            loop = asyncio.get_running_loop()
            due = loop.time() + delay_s
            pending = self._timers.get(key)
            if pending is not None:
                if pending[0] <= due:
                    return
                pending[1].cancel()
            self._timers[key] = (due, loop.call_at(due, self._fire, key))
            return
        if key in self._processing:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._ready.put_nowait(key)

    def discard(self, key: K) -> None:
        """Forget ``key``: no pending retry, no failure count (it was deleted)."""
        pending = self._timers.pop(key, None)
        if pending is not None:
            pending[1].cancel()
        self.failures.pop(key, None)
        self._dirty.discard(key)
        lock = self.locks.get(key)
        if lock is not None and not lock.locked():
            del self.locks[key]

    def backoff_s(self, failures: int) -> float:
        delay = min(self.max_delay_s, self.base_delay_s * 2 ** max(0, failures - 1))
        return float(delay * self._rng.uniform(0.9, 1.1))

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._work(), name=f"workqueue-{i}") for i in range(self._workers)
        ]

    async def stop(self) -> None:
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _work(self) -> None:
        while True:
            key = await self._ready.get()
            self._queued.discard(key)
            self._processing.add(key)
            delay: float | None
            try:
                async with self.locks[key]:
                    delay = await self._process(key)
                self.failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                self.failures[key] = self.failures.get(key, 0) + 1
                delay = self.backoff_s(self.failures[key])
                logger.warning(
                    "processing %s failed (attempt %d), retrying in %.1fs: %s",
                    key,
                    self.failures[key],
                    delay,
                    err,
                )
            finally:
                self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self.add(key)
            elif delay is not None:
                self.add(key, delay)
