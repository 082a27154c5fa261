"""Timing by what engines do: a long non-streaming answer is not a first-token timeout,
and a restarted engine takes traffic at its first good health check. Loopback, real
simulated engines (one of them a ``tandem engine sim`` process that is killed)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable

import aiohttp
import pytest

from tandem.router.config import RouterConfig, Timeouts
from tests.router.conftest import (
    MODEL,
    Factory,
    SimEngine,
    die_with_parent,
    free_port,
    metric_value,
    poll_until,
    wait_healthy,
)

pytestmark = pytest.mark.asyncio

BOUND_S = 60.0
Sims = Callable[..., Awaitable[SimEngine]]


def config(first_token_s: float) -> RouterConfig:
    timeouts = Timeouts(
        connect_s=1.0, prefill_s=10.0, first_token_s=first_token_s, idle_stream_s=first_token_s
    )
    return RouterConfig(timeouts=timeouts, scrape_interval_s=0.1, prefix_affinity_tokens=0)


async def test_a_non_streaming_answer_longer_than_the_first_token_timeout(
    pd_router: Factory,
) -> None:
    """250 tokens take the simulated engine about 3 s; the first-token timeout is 1 s.
    Timed by first token, it failed twice (504, the work done on both engines); timed by
    the engine's progress, it is answered once."""
    handle = await pd_router(config(1.0), prefill=["prefill"], decode=["decode", "decode"])
    body = {"model": MODEL, "prompt": "Tell a long story. " * 10, "max_tokens": 250}
    async with (
        asyncio.timeout(BOUND_S),
        aiohttp.ClientSession() as session,
        session.post(handle.base_url + "/completions", json=body) as resp,
    ):
        assert resp.status == 200, await resp.text()
        answer = await resp.json()
    assert answer["usage"]["completion_tokens"] == 250
    generated = [(await e.stats())["engine"]["generation_tokens_total"] for e in handle.engines[1:]]
    assert sorted(generated) == [0, 250], "one decode engine did the work, once"
    assert metric_value(await handle.metrics(), "tandem_router_retries_total") == 0


async def spawn_on(port: int) -> SimEngine:
    """A ``tandem engine sim`` decode process on ``port``, once healthy."""
    command = [sys.executable, "-m", "tandem.cli", "engine", "sim", "--role", "decode",
               "--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL,
               "--max-model-len", "4096"]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    engine = SimEngine(url=f"http://127.0.0.1:{port}", role="decode", process=process)
    await wait_healthy(engine.url, process)
    return engine


async def test_a_restarted_engine_takes_traffic_at_its_first_good_health_check(
    pd_router: Factory, sims: Sims
) -> None:
    """Ten streams cut by a crash used to count as ten failures and keep the restarted
    engine out for 30 s while another engine took everything; now they are one incident,
    and the first good scrape of the restarted engine clears it."""
    port = free_port()
    engines = [await spawn_on(port)]
    try:
        handle = await pd_router(config(10.0), prefill=["prefill"], decode=[engines[0]])
        streams = await _open_streams(handle.base_url, 10)
        await engines[0].kill()
        for task in streams:
            assert await task == 200  # each ended with an SSE error event
        victim = handle.router.endpoint("decode", engines[0].url)
        assert victim is not None and not victim.healthy(asyncio.get_running_loop().time())
        other = await sims("decode")  # a healthy engine that would take every request
        handle.router.set_pool_urls("decode", [engines[0].url, other.url])
        engines.append(await spawn_on(port))

        async def scraped_again() -> bool:
            return victim.scrape_ok  # its first good health check since the crash

        await poll_until(scraped_again, timeout_s=BOUND_S)
        async with aiohttp.ClientSession() as session:
            for i in range(10):
                body = {"model": MODEL, "prompt": f"{i} back?", "max_tokens": 2}
                async with (
                    asyncio.timeout(BOUND_S),
                    session.post(handle.base_url + "/completions", json=body) as resp,
                ):
                    assert resp.status == 200
        served = (await engines[1].stats())["engine"]["generation_tokens_total"]
        assert served > 0, "the restarted engine got no request"
    finally:
        for engine in engines:
            await engine.stop()


async def _open_streams(base_url: str, n: int) -> list[asyncio.Task[int]]:
    """``n`` long streams, each past its first chunk; each task ends with the status."""
    started = asyncio.Semaphore(0)

    async def one(i: int) -> int:
        body = {"model": MODEL, "prompt": f"stream {i}", "max_tokens": 4000, "stream": True}
        async with (
            asyncio.timeout(BOUND_S),
            aiohttp.ClientSession() as session,
            session.post(base_url + "/completions", json=body) as resp,
        ):
            await resp.content.readany()
            started.release()
            await resp.read()  # until the router ends the cut stream
            return resp.status

    tasks = [asyncio.create_task(one(i)) for i in range(n)]
    for _ in range(n):
        async with asyncio.timeout(BOUND_S):
            await started.acquire()
    return tasks
