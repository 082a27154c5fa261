"""Overload and retries on loopback: an engine's 503 reaches the client as an overload,
retries go only where another engine can take the request, and no prefill is wasted."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from tandem.engine.server.config import FaultConfig
from tandem.router.config import RouterConfig, Timeouts
from tests.router.conftest import MODEL, Factory, SimEngine, metric_value, poll_until

pytestmark = pytest.mark.asyncio

Sims = Callable[..., Awaitable[SimEngine]]
BOUND_S = 30.0
BODY = {"model": MODEL, "prompt": "Overloaded? " * 40, "max_tokens": 4}


def config(**overrides: Any) -> RouterConfig:
    settings: dict[str, Any] = {"scrape_interval_s": 0.2, "prefix_affinity_tokens": 0}
    return RouterConfig(
        timeouts=Timeouts(connect_s=1.0, prefill_s=5.0, first_token_s=5.0, idle_stream_s=5.0),
        **{**settings, **overrides},
    )


async def post(url: str, body: dict[str, Any]) -> tuple[int, CIMultiDict[str], Any]:
    async with (
        asyncio.timeout(BOUND_S),
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/completions", json=body) as resp,
    ):
        return resp.status, CIMultiDict(resp.headers), await resp.json(content_type=None)


async def engine_stats(engine: SimEngine) -> dict[str, Any]:
    stats: dict[str, Any] = (await engine.stats())["engine"]
    return stats


async def test_an_overloaded_decode_engine_is_a_503_with_retry_after(
    pd_router: Factory, sims: Sims
) -> None:
    """The only decode engine refuses (vLLM's --max-num-queued-reqs): the client gets a
    503 with Retry-After and an OpenAI error of the router's own words, after one prefill,
    and the prefill engine's KV is freed by the refusal, not held for the lease."""
    prefill = await sims("prefill", kv_lease_s=3000.0)
    full = await sims("decode", max_num_queued_reqs=0)
    handle = await pd_router(config(retry_after_s=3), prefill=[prefill], decode=[full])
    status, headers, body = await post(handle.url, BODY)
    assert status == 503, body
    assert headers["Retry-After"] == "3" and headers["X-Request-Id"]
    error = body["error"]
    assert error["type"] == "ServiceUnavailableError" and error["code"] == 503
    assert "overloaded" in error["message"] and "{" not in error["message"]
    assert "127.0.0.1" not in error["message"]
    stats = await engine_stats(prefill)
    assert sum(stats["finished_by_reason"].values()) == 1, "one prefill, not two"

    async def released() -> bool:
        return (await engine_stats(prefill))["num_kv_held"] == 0

    await poll_until(released, timeout_s=BOUND_S)
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_retries_total") == 0
    assert metric_value(text, "tandem_router_requests_total", code="503") == 1


async def test_overload_goes_to_another_decode_engine_with_room(
    pd_router: Factory, sims: Sims
) -> None:
    prefill = await sims("prefill", kv_lease_s=3000.0)
    full = await sims("decode", max_num_queued_reqs=0)
    roomy = await sims("decode")
    handle = await pd_router(config(), prefill=[prefill], decode=[full, roomy])
    for _ in range(6):
        status, _, body = await post(handle.url, BODY)
        assert status == 200, body
    text = await handle.metrics()
    decode_retries = metric_value(text, "tandem_router_retries_total", leg="decode")
    assert decode_retries >= 1, "at least one request met the full engine first"
    # the full engine was told the KV, and freed it: each retry ran prefill again, counted
    assert metric_value(text, "tandem_router_retries_total", leg="prefill") == decode_retries
    finished = (await engine_stats(prefill))["finished_by_reason"]
    assert sum(finished.values()) == 6 + decode_retries
    assert (await engine_stats(prefill))["num_kv_held"] == 0


async def test_a_failing_sole_decode_engine_costs_one_prefill(
    pd_router: Factory, sims: Sims
) -> None:
    """No other decode engine: no retry, so no second prefill (each failure cost two)."""
    prefill = await sims("prefill")
    broken = await sims("decode", faults=FaultConfig(error_rate=1.0, error_status=500))
    handle = await pd_router(config(), prefill=[prefill], decode=[broken])
    for _ in range(3):
        status, headers, body = await post(handle.url, BODY)
        assert status == 502, body
        assert "Retry-After" not in headers
        assert body["error"]["message"] == "the decode engine failed (HTTP 500)"
    assert sum((await engine_stats(prefill))["finished_by_reason"].values()) == 3
    assert metric_value(await handle.metrics(), "tandem_router_retries_total") == 0


async def test_an_unreachable_decode_engine_hands_the_kv_to_the_other(
    pd_router: Factory, sims: Sims
) -> None:
    """A decode engine that never got the request leaves the KV to reuse: one prefill."""
    prefill = await sims("prefill", kv_lease_s=3000.0)
    good = await sims("decode")
    gone = await sims("decode")
    # one scrape at start only, so the router still takes `gone` for healthy when it dies
    handle = await pd_router(
        config(scrape_interval_s=600.0), prefill=[prefill], decode=[gone, good]
    )

    async def scraped() -> bool:
        return all(e.tokens_total is not None for e in handle.router.pools["decode"].members())

    await poll_until(scraped, timeout_s=BOUND_S)
    await gone.stop()  # its port is closed: connections are refused
    busy = handle.router.endpoint("decode", good.url)
    assert busy is not None
    busy.outstanding_requests = 50  # so that `gone` is tried first
    status, _, body = await post(handle.url, BODY)
    assert status == 200, body
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_retries_total", leg="decode") == 1
    assert metric_value(text, "tandem_router_retries_total", leg="prefill") == 0
    assert sum((await engine_stats(prefill))["finished_by_reason"].values()) == 1
