"""Faults: engine errors, hangs, stalls and deaths end every request; disconnects free slots.

Every client wait is bounded (``asyncio.timeout``), so a hang fails the test instead of
stalling it; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Awaitable, Callable

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI

from tandem.engine.server.config import FaultConfig
from tandem.router.config import RouterConfig, Timeouts
from tests.router.conftest import (
    MODEL,
    Factory,
    SimEngine,
    metric_value,
    poll_until,
    spawn_sim,
)

pytestmark = pytest.mark.asyncio

Sims = Callable[..., Awaitable[SimEngine]]
PROMPT = "Explain disaggregated serving. " * 10
BOUND_S = 30.0


def client_for(base_url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=BOUND_S)


def fast_timeouts(**overrides: float) -> RouterConfig:
    timeouts = Timeouts(connect_s=1.0, prefill_s=0.5, first_token_s=0.5, idle_stream_s=0.5)
    return RouterConfig(
        timeouts=Timeouts(**{**timeouts.__dict__, **overrides}),
        scrape_interval_s=0.2,
        prefix_affinity_tokens=0,  # one prompt would always hash to the same engine
    )


async def complete(handle_url: str, max_tokens: int = 4) -> str:
    async with asyncio.timeout(BOUND_S):
        answer = await client_for(handle_url).completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=max_tokens
        )
    return answer.choices[0].finish_reason


async def test_hanging_prefill_pool_times_out_retries_and_falls_back(
    pd_router: Factory, sims: Sims
) -> None:
    hang = FaultConfig(hang_rate=1.0)
    prefill = [await sims("prefill", faults=hang), await sims("prefill", faults=hang)]
    handle = await pd_router(fast_timeouts(), prefill=prefill, decode=["decode"])
    assert await complete(handle.base_url) == "length"
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_retries_total", leg="prefill") == 1
    assert metric_value(text, "tandem_router_retries_total", leg="fallback") == 1
    decode_stats = (await handle.engines[2].stats())["engine"]
    assert decode_stats["prompt_tokens_external_total"] == 0  # prefilled locally


async def test_failing_prefill_is_retried_on_another(pd_router: Factory, sims: Sims) -> None:
    bad = await sims("prefill", faults=FaultConfig(error_rate=1.0, error_status=500))
    handle = await pd_router(fast_timeouts(), prefill=[bad, "prefill"], decode=["decode"])
    for _ in range(30):
        assert await complete(handle.base_url) == "length"
        if metric_value(await handle.metrics(), "tandem_router_retries_total", leg="prefill"):
            break
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_retries_total", leg="prefill") >= 1
    assert metric_value(text, "tandem_router_retries_total", leg="fallback") == 0
    assert (await handle.engines[2].stats())["engine"]["prompt_tokens_external_total"] > 0


async def test_failing_decode_is_retried_with_a_fresh_prefill(
    pd_router: Factory, sims: Sims
) -> None:
    bad = await sims("decode", faults=FaultConfig(error_rate=1.0, error_status=503))
    handle = await pd_router(fast_timeouts(), prefill=["prefill"], decode=[bad, "decode"])
    requests = 0
    while requests < 30:
        requests += 1
        assert await complete(handle.base_url) == "length"
        if metric_value(await handle.metrics(), "tandem_router_retries_total", leg="decode"):
            break
    retries = metric_value(await handle.metrics(), "tandem_router_retries_total", leg="decode")
    assert retries >= 1
    finished = (await handle.engines[0].stats())["engine"]["finished_by_reason"]
    # the bad engine may have read the KV, so each decode retry re-ran the prefill
    assert sum(finished.values()) == requests + retries


async def test_decode_that_never_answers_is_a_504(pd_router: Factory, sims: Sims) -> None:
    hang = FaultConfig(hang_rate=1.0)
    decode = [await sims("decode", faults=hang), await sims("decode", faults=hang)]
    handle = await pd_router(fast_timeouts(), prefill=["prefill"], decode=decode)
    with pytest.raises(openai.APIStatusError) as err:
        await complete(handle.base_url)
    assert err.value.status_code == 504
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_retries_total", leg="decode") == 1
    assert metric_value(text, "tandem_router_requests_total", code="504") == 1


async def test_stalled_stream_ends_with_an_sse_error_and_done(pd_router: Factory) -> None:
    decode = await spawn_sim("decode")
    try:
        handle = await pd_router(fast_timeouts(), prefill=["prefill"], decode=[decode])
        body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4000, "stream": True}
        async with (
            asyncio.timeout(BOUND_S),
            aiohttp.ClientSession() as session,
            session.post(handle.base_url + "/completions", json=body) as resp,
        ):
            assert resp.status == 200
            await resp.content.readany()
            decode.signal(signal.SIGSTOP)  # alive but silent
            raw = await resp.read()
        events = [e for e in raw.split(b"\n\n") if e.strip()]
        assert events[-1] == b"data: [DONE]"
        error = json.loads(events[-2].removeprefix(b"data: "))["error"]
        assert error["code"] == 504 and "sent nothing" in error["message"]
        assert metric_value(await handle.metrics(), "tandem_router_requests_total", code="504") == 1
    finally:
        await decode.stop()


async def test_client_disconnect_frees_the_engine_slot(pd_router: Factory) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    decode = handle.engines[1]
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4000, "stream": True}
    async with asyncio.timeout(BOUND_S):
        session = aiohttp.ClientSession()
        resp = await session.post(handle.base_url + "/completions", json=body)
        assert resp.status == 200
        await resp.content.readany()
        assert await decode.running() == 1
        resp.close()
        await session.close()

        async def released() -> bool:
            return await decode.running() == 0 and handle.router.admission.total == 0

        await poll_until(released)
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_inflight") == 0
    assert metric_value(text, "tandem_router_requests_total", code="499") == 1


@pytest.mark.slow
async def test_killing_a_prefill_and_a_decode_under_load(pd_router: Factory) -> None:
    engines = await asyncio.gather(
        spawn_sim("prefill"), spawn_sim("prefill"), spawn_sim("decode"), spawn_sim("decode")
    )
    try:
        handle = await pd_router(
            RouterConfig(scrape_interval_s=0.2), prefill=engines[:2], decode=engines[2:]
        )
        client = client_for(handle.base_url)

        async def one(i: int) -> str:
            try:
                async with asyncio.timeout(BOUND_S):
                    stream = await client.chat.completions.create(
                        model=MODEL,
                        messages=[{"role": "user", "content": f"{i} {PROMPT}"}],
                        max_tokens=60,
                        stream=True,
                    )
                    finish = None
                    async for chunk in stream:
                        for choice in chunk.choices:
                            finish = choice.finish_reason or finish
                    return f"ok:{finish}"
            except openai.APIError as err:
                return f"error:{type(err).__name__}"

        async def arrivals() -> list[str]:
            """Requests arriving one by one, so some are in each phase at the kill."""
            tasks = []
            for i in range(40):
                tasks.append(asyncio.create_task(one(i)))
                await asyncio.sleep(0.01)
            return await asyncio.gather(*tasks)

        load = asyncio.create_task(arrivals())

        async def streaming() -> bool:
            text = await handle.metrics()
            return metric_value(text, "tandem_router_time_to_first_token_seconds_count") >= 10

        await poll_until(streaming)
        await engines[0].kill()
        await engines[2].kill()
        outcomes = await load  # each request is bounded by BOUND_S
        assert all(o in ("ok:length",) or o.startswith("error:") for o in outcomes), outcomes
        assert any(o == "ok:length" for o in outcomes)
        after = await asyncio.gather(*(one(100 + i) for i in range(10)))
        assert after == ["ok:length"] * 10, after
    finally:
        for engine in engines:
            await engine.stop()


async def test_no_prefill_engine_means_decode_only_at_once(pd_router: Factory) -> None:
    # were the router to wait for a prefill engine, it would wait 600 s and the bounded
    # wait in complete() would fail the test
    handle = await pd_router(fast_timeouts(connect_s=600.0), prefill=["prefill"], decode=["decode"])
    handle.router.set_pool_urls("prefill", [])  # the prefill pool scaled to zero
    assert await complete(handle.base_url) == "length"
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_retries_total", leg="fallback") == 1


async def test_empty_decode_pool_waits_then_503(pd_router: Factory) -> None:
    handle = await pd_router(fast_timeouts(connect_s=0.3), prefill=["prefill"], decode=["decode"])
    handle.router.set_pool_urls("decode", [])
    with pytest.raises(openai.APIStatusError) as err:
        await complete(handle.base_url)
    assert err.value.status_code == 503
    assert err.value.response.headers["Retry-After"] == "1"
