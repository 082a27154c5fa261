"""The real-time driver: one asyncio task steps the engine model; requests wait on streams.

I/O: asyncio timing and, for the decode role, HTTP KV pulls (``kv_transfer.py``). Per token
the loop only bumps a counter on the request's stream and sets its event; handlers render
text when they wake, so a slow client costs its own handler, not the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from tandem.engine.model import (
    Engine,
    EngineRequest,
    FinishedRequest,
    IterationResult,
    KVTransferStart,
)
from tandem.engine.server.errors import ApiError
from tandem.engine.server.metrics import EngineMetrics
from tandem.engine.server.realtime import AsyncioClock

log = logging.getLogger(__name__)

#: if the loop is this far (simulated seconds) behind its own timeline it stops catching up
CATCHUP_LIMIT_S = 0.5

PullFn = Callable[[dict[str, Any], KVTransferStart], Awaitable[bool]]
ReleaseFn = Callable[[dict[str, Any]], Coroutine[Any, Any, None]]


class RequestStream:
    """What a handler waits on: token count so far, the finish record, or an error."""

    __slots__ = (
        "arrival_s",
        "emitted",
        "error",
        "event",
        "finished",
        "kv_params",
        "last_model_s",
        "last_token_s",
        "request_id",
    )

    def __init__(
        self,
        request_id: str,
        arrival_s: float,
        kv_params: dict[str, Any] | None,
        event: asyncio.Event | None = None,
    ) -> None:
        self.request_id = request_id
        self.arrival_s = arrival_s
        self.kv_params = kv_params
        self.emitted = 0
        self.finished: FinishedRequest | None = None
        self.error: ApiError | None = None
        self.event = event or asyncio.Event()
        """Set on every change; the choices of one request share theirs."""
        self.last_token_s: float | None = None
        self.last_model_s = 0.0

    @property
    def done(self) -> bool:
        return self.finished is not None or self.error is not None


@dataclass
class LoopStats:
    """How faithfully the loop keeps the modelled timeline (for ``/tandem/stats``)."""

    iterations: int = 0
    tokens: int = 0
    itl_count: int = 0
    itl_wall_sum_s: float = 0.0
    """Sum of measured gaps between a request's tokens, simulated seconds."""
    itl_model_sum_s: float = 0.0
    """Sum of the modelled gaps: the duration of the iteration that produced each token
    (for a request decoding every iteration, its modelled inter-token latency)."""
    max_lag_s: float = 0.0
    """Largest delay of an iteration's delivery past its modelled end."""
    resets: int = 0
    """Times the loop fell more than ``CATCHUP_LIMIT_S`` behind and restarted its timeline."""


class EngineRunner:
    """Owns the engine model and the task that steps it in real time."""

    def __init__(self, engine: Engine, clock: AsyncioClock, metrics: EngineMetrics) -> None:
        self.engine = engine
        self.clock = clock
        self.metrics = metrics
        self.streams: dict[str, RequestStream] = {}
        self.loop_stats = LoopStats()
        self.pull: PullFn | None = None
        """Decode role: fetches a request's KV from its prefill engine; True on success."""
        self.release: ReleaseFn | None = None
        """Decode role: tells a prefill engine to free KV this engine will never pull."""
        self._wake = asyncio.Event()
        self._prev_end_s: float | None = None
        self._last_add_s = float("-inf")
        self._tasks: set[asyncio.Task[None]] = set()
        self._seq = 0

    def unique_id(self, request_id: str) -> str:
        """``request_id``, suffixed if a request of that id is already in flight here."""
        if request_id not in self.streams:
            return request_id
        self._seq += 1
        return f"{request_id}-{self._seq}"

    def submit(
        self,
        req: EngineRequest,
        kv_params: dict[str, Any] | None,
        event: asyncio.Event | None = None,
    ) -> RequestStream:
        now = self.clock.now_s()
        self.engine.add_request(req, now)
        stream = RequestStream(req.request_id, now, kv_params, event)
        self.streams[req.request_id] = stream
        self._last_add_s = now
        self._wake.set()
        return stream

    def abort(self, request_id: str) -> None:
        """Client went away: drop the request and free its blocks (and, on a decode
        engine whose KV pull has not started, the prefill engine's copy)."""
        stream = self.streams.pop(request_id, None)
        if stream is not None and stream.kv_params is not None:
            self.release_remote(stream.kv_params)
        fin = self.engine.abort(request_id, self.clock.now_s())
        if fin is not None:
            self.metrics.on_finished(fin)
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def release_remote(self, kv_params: dict[str, Any] | None) -> None:
        """Decode role: a request that carried a prefill engine's KV will never pull it
        (refused, or aborted before its pull): tell that engine to free it now, as
        vLLM's decode engine does (``notify_kv_transfer_request_rejected`` and the NIXL
        connector's ``request_finished`` for a request still ``do_remote_prefill``),
        instead of leaving it held until its lease ends."""
        if self.release is None or not kv_params or not kv_params.get("do_remote_prefill"):
            return
        task = asyncio.get_running_loop().create_task(self.release(kv_params))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def fail_all(self, error: ApiError) -> None:
        """The engine died: every waiting handler gets ``error``."""
        for request_id, stream in list(self.streams.items()):
            stream.error = error
            stream.event.set()
            self.engine.abort(request_id, self.clock.now_s())
        self.streams.clear()

    async def run(self) -> None:
        """Step forever; cancelled on shutdown."""
        engine, clock = self.engine, self.clock
        while True:
            self._wake.clear()
            now = clock.now_s()
            timer = engine.next_timer_s()
            if not engine.has_work and (timer is None or timer > now):
                self._prev_end_s = None
                await self._idle_wait()
                continue
            start = now
            prev = self._prev_end_s
            if prev is not None:
                if now - prev < CATCHUP_LIMIT_S:
                    start = max(prev, min(now, self._last_add_s))
                else:
                    self.loop_stats.resets += 1
            result = engine.step(start)
            if result.kv_transfers_started:
                self._start_pulls(result.kv_transfers_started)
            if result.idle:
                self._prev_end_s = None
                if result.kv_expired:
                    self.metrics.on_iteration(result, 0)
                await self._idle_wait()
                continue
            await clock.sleep_until(result.end_s)
            self._dispatch(result)
            self._prev_end_s = result.end_s

    async def _idle_wait(self) -> None:
        timer = self.engine.next_timer_s()
        timeout = None
        if timer is not None:
            timeout = max(0.0, (timer - self.clock.now_s()) / self.clock.speedup) + 1e-3
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _dispatch(self, result: IterationResult) -> None:
        now = self.clock.now_s()
        end_s = result.end_s
        duration_s = result.duration_s
        streams = self.streams
        metrics = self.metrics
        stats = self.loop_stats
        itl_observe = metrics.itl.observe
        lag = now - end_s
        if lag > stats.max_lag_s:
            stats.max_lag_s = lag
        delivered = 0
        for request_id in result.emitted:
            stream = streams.get(request_id)
            if stream is None:
                continue  # aborted while the iteration ran: vLLM drops its token uncounted
            delivered += 1
            stream.emitted += 1
            last = stream.last_token_s
            if last is None:
                metrics.ttft.observe(now - stream.arrival_s)
            else:
                itl_observe(now - last)
                stats.itl_count += 1
                stats.itl_wall_sum_s += now - last
                stats.itl_model_sum_s += min(end_s - stream.last_model_s, duration_s)
            stream.last_token_s = now
            stream.last_model_s = end_s
            stream.event.set()
        for fin in result.finished:
            self.metrics.on_finished(fin)
            stream = streams.pop(fin.request_id, None)
            if stream is not None:
                stream.finished = fin
                stream.event.set()
        stats.iterations += 1
        stats.tokens += len(result.emitted)
        metrics.on_iteration(result, len(result.preempted), delivered)

    def _start_pulls(self, starts: tuple[KVTransferStart, ...]) -> None:
        for start in starts:
            stream = self.streams.get(start.request_id)
            if stream is None:
                continue
            task = asyncio.get_running_loop().create_task(self._pull_one(stream, start))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pull_one(self, stream: RequestStream, start: KVTransferStart) -> None:
        t0 = self.clock.now_s()
        ok = False
        params, stream.kv_params = stream.kv_params, None
        if self.pull is not None and params is not None:
            try:
                ok = await self.pull(params, start)
            except Exception:  # a broken peer must fail the request, never the loop
                log.exception("KV pull for %s failed", stream.request_id)
                ok = False
        if ok:
            await self.clock.sleep_until(t0 + start.transfer_s)
        fin = self.engine.complete_kv_transfer(stream.request_id, ok, self.clock.now_s())
        if fin is not None:
            self.metrics.on_finished(fin)
            live = self.streams.pop(fin.request_id, None)
            if live is not None:
                live.finished = fin
                live.event.set()
        self._wake.set()

    def waiting_for_pull(self) -> list[RequestStream]:
        """Decode role: streams whose KV pull has not started yet (for lease heartbeats)."""
        return [s for s in self.streams.values() if s.kv_params is not None]

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
