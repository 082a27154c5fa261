"""Replay a trace against the local router: one streaming completion per trace row. Does I/O.

Each request is sent at its trace time divided by the rate scale, with a prompt of
exactly the trace's prompt tokens (token ids, so the engine counts them exactly) and
``max_tokens`` set to the trace's output tokens. Sending stops at the duration; the
requests still in flight get a grace period, then are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp

from tandem.traces.parse import TraceRequest


@dataclass
class LoadStats:
    sent: int = 0
    ok: int = 0
    failed: int = 0
    tokens: int = 0


async def _one(
    session: aiohttp.ClientSession, url: str, model: str, req: TraceRequest, stats: LoadStats
) -> None:
    body = {
        "model": model,
        "prompt": [1000 + (i % 20000) for i in range(req.prompt_tokens)],
        "max_tokens": req.output_tokens,
        "stream": True,
    }
    stats.sent += 1
    try:
        async with session.post(f"{url}/v1/completions", json=body) as resp:
            if resp.status != 200:
                stats.failed += 1
                await resp.read()
                return
            async for line in resp.content:
                if line.startswith(b"data: {"):
                    stats.tokens += 1
        stats.ok += 1
    except (aiohttp.ClientError, TimeoutError, RuntimeError):
        # RuntimeError: aiohttp's "Connection closed" when an engine or the router stops.
        stats.failed += 1


async def replay_trace(
    url: str,
    model: str,
    trace: Sequence[TraceRequest],
    rate_scale: float,
    duration_s: float,
    clock: Callable[[], float],
    grace_s: float = 30.0,
) -> LoadStats:
    """Send ``trace`` (times divided by ``rate_scale``) for ``duration_s`` seconds."""
    stats = LoadStats()
    tasks: set[asyncio.Task[None]] = set()
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as s:
        start = clock()
        for req in trace:
            at = req.arrival_s / rate_scale
            if at > duration_s:
                break
            delay = start + at - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(_one(s, url, model, req, stats))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        remaining = start + duration_s - clock()
        if remaining > 0:
            await asyncio.sleep(remaining)
        if tasks:
            _, pending = await asyncio.wait(set(tasks), timeout=grace_s)
            for task in pending:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*pending, return_exceptions=True)
    return stats
