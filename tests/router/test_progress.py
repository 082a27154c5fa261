"""Timing by what engines do: a long non-streaming answer is not a first-token timeout,
and a restarted engine takes traffic at its first good health check. Loopback, real
simulated engines (one of them a ``tandem engine sim`` process that is killed)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from tandem.engine.server.config import FaultConfig
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


async def metrics_break_at_first_generation(engine_url: str) -> tuple[str, web.AppRunner]:
    """A loopback front for ``engine_url`` whose ``/metrics`` answers 500 once a
    generation request has passed through it (as a busy vLLM engine's scrape times out).
    Non-streaming only: each answer is relayed whole."""
    generating = False

    async def forward(request: web.Request) -> web.Response:
        nonlocal generating
        if request.path == "/metrics" and generating:
            return web.Response(status=500)
        generating = generating or request.method == "POST"
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method, engine_url + request.path_qs, data=await request.read(),
                headers=headers,
            ) as resp,
        ):  # fmt: skip
            body = await resp.read()
            kind = resp.headers.get("Content-Type", "text/plain").split(";")[0]
            return web.Response(body=body, status=resp.status, content_type=kind)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return f"http://127.0.0.1:{runner.addresses[0][1]}", runner


@pytest.mark.parametrize("hangs", [False, True])
async def test_failing_scrapes_are_no_evidence_of_a_stall(
    pd_router: Factory, sims: Sims, hangs: bool
) -> None:
    """The decode engine's scrapes fail from the moment it gets the request. Working, it
    is waited for: the answer (about 3 s) comes though the 1 s first-token timeout passes
    with no scrape showing progress (it was a 504). Hanging, the leg still fails, at the
    idle timeout (the blind limit, 3 s here) rather than never."""
    faults = FaultConfig(hang_rate=1.0 if hangs else 0.0)
    blind_s = 3.0 if hangs else 30.0  # working: far beyond the answer, however slow
    engine = await sims("decode", faults=faults)
    front, runner = await metrics_break_at_first_generation(engine.url)
    try:
        timeouts = Timeouts(connect_s=1.0, prefill_s=10.0, first_token_s=1.0, idle_stream_s=blind_s)
        config = RouterConfig(timeouts=timeouts, scrape_interval_s=0.1, prefix_affinity_tokens=0)
        handle = await pd_router(config, prefill=["prefill"], decode=[SimEngine(front, "decode")])
        body = {"model": MODEL, "prompt": "Tell a long story. " * 10, "max_tokens": 250}
        async with (
            asyncio.timeout(BOUND_S),
            aiohttp.ClientSession() as session,
            session.post(handle.base_url + "/completions", json=body) as resp,
        ):
            text = await resp.text()
        if hangs:
            assert resp.status == 504, text
            assert "no progress within 3 s" in text  # the blind limit, not the 1 s one
        else:
            assert resp.status == 200, text
            assert json.loads(text)["usage"]["completion_tokens"] == 250
    finally:
        await runner.cleanup()


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
