"""Admission (429 with Retry-After), body limits and priority classes, on loopback."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tandem.router.config import ClassConfig, RouterConfig
from tests.router.conftest import MODEL, Factory, metric_value

pytestmark = pytest.mark.asyncio

LONG = {"model": MODEL, "prompt": "hold the slot", "max_tokens": 3000, "stream": True}
SHORT = {"model": MODEL, "prompt": "quick", "max_tokens": 2}


@contextlib.asynccontextmanager
async def held_stream(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None
) -> AsyncIterator[aiohttp.ClientResponse]:
    """A streaming request that has its first chunk, i.e. holds an in-flight slot."""
    async with session.post(url + "/v1/completions", json=LONG, headers=headers) as resp:
        assert resp.status == 200
        await resp.content.readany()
        yield resp
        resp.close()


async def test_over_the_inflight_bound_is_429_with_retry_after(pd_router: Factory) -> None:
    handle = await pd_router(RouterConfig(max_inflight=2), prefill=["prefill"], decode=["decode"])
    async with (
        aiohttp.ClientSession() as session,
        held_stream(session, handle.url),
        held_stream(session, handle.url),
        session.post(handle.url + "/v1/completions", json=SHORT) as resp,
    ):
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "1"
        error = (await resp.json())["error"]
        assert error["code"] == 429 and "max_inflight" in error["message"]
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_rejections_total", reason="max_inflight") == 1
    assert metric_value(text, "tandem_router_requests_total", code="429") == 1


async def test_class_limit_and_class_header(pd_router: Factory) -> None:
    config = RouterConfig(
        classes=(ClassConfig("interactive", 0), ClassConfig("batch", 10, max_inflight=1)),
        default_class="interactive",
        send_priority=True,
    )
    handle = await pd_router(config, prefill=["prefill"], decode=["decode"])
    batch = {config.priority_header: "batch"}
    async with aiohttp.ClientSession() as session, held_stream(session, handle.url, batch):
        url = handle.url + "/v1/completions"
        async with session.post(url, json=SHORT, headers=batch) as resp:
            assert resp.status == 429 and resp.headers["Retry-After"] == "1"
        async with session.post(url, json=SHORT) as resp:
            assert resp.status == 200, await resp.text()
        async with session.post(url, json=SHORT, headers={config.priority_header: "vip"}) as resp:
            assert resp.status == 400
            assert "interactive, batch" in (await resp.json())["error"]["message"]
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_rejections_total", **{"class": "batch"}) == 1
    assert (
        metric_value(
            text, "tandem_router_requests_total", **{"class": "interactive", "code": "200"}
        )
        == 1
    )
    assert metric_value(text, "tandem_router_rejections_total", reason="unknown_class") == 1


async def test_body_limit_with_and_without_content_length(pd_router: Factory) -> None:
    handle = await pd_router(
        RouterConfig(max_body_bytes=2048), prefill=["prefill"], decode=["decode"]
    )
    big = {"model": MODEL, "prompt": "x" * 4096, "max_tokens": 1}

    async def chunked() -> AsyncIterator[bytes]:
        for _ in range(8):
            yield b" " * 512

    async with aiohttp.ClientSession() as session:
        url = handle.url + "/v1/completions"
        async with session.post(url, json=big) as resp:
            assert resp.status == 413
        async with session.post(url, data=chunked()) as resp:
            assert resp.status == 413
        async with session.post(url, json=SHORT) as resp:
            assert resp.status == 200
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_rejections_total", reason="body_too_large") == 2
