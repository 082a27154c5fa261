"""Scraping real HTTP servers on loopback: healthy, slow, failing and absent pods."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tandem.observe.scrape import ScrapeError, Scraper, scrape_metrics_text
from tandem.observe.source import PoolTargets, metrics_url
from tandem.router.metrics import RouterMetrics
from tests.observe.vllm_metrics import VllmMetrics

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def page_app(render: Callable[[], str], seen_accept: list[str] | None = None) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        if seen_accept is not None:
            seen_accept.append(request.headers.get("Accept", ""))
        return web.Response(text=render(), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture
def release() -> asyncio.Event:
    """Set at the end of a test to let a hanging handler finish."""
    return asyncio.Event()


@pytest.fixture
async def hanging_url(aiohttp_server: ServerFactory, release: asyncio.Event) -> AsyncIterator[str]:
    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="vllm:num_requests_waiting 0\n")

    app = web.Application()
    app.router.add_get("/metrics", hang)
    server = await aiohttp_server(app)
    yield str(server.make_url("/metrics"))
    release.set()


@pytest.fixture
async def error_url(aiohttp_server: ServerFactory) -> str:
    async def fail(request: web.Request) -> web.Response:
        return web.Response(status=500, text="engine exploded")

    app = web.Application()
    app.router.add_get("/metrics", fail)
    return str((await aiohttp_server(app)).make_url("/metrics"))


async def test_each_failure_is_a_readable_scrape_error(
    session: aiohttp.ClientSession, hanging_url: str, error_url: str
) -> None:
    with pytest.raises(ScrapeError, match=r"within 0.2 s"):
        await scrape_metrics_text(session, hanging_url, timeout_s=0.2)
    with pytest.raises(ScrapeError, match=r"HTTP 500 .*engine exploded"):
        await scrape_metrics_text(session, error_url, timeout_s=2)
    refused = metrics_url("127.0.0.1", closed_port())
    with pytest.raises(ScrapeError, match=r"ClientConnectorError"):
        await scrape_metrics_text(session, refused, timeout_s=2)


async def test_scraper_reports_bad_pods_and_computes_rates_on_the_second_tick(
    aiohttp_server: ServerFactory,
    session: aiohttp.ClientSession,
    hanging_url: str,
    error_url: str,
) -> None:
    prefill, decode = VllmMetrics(), VllmMetrics()
    prefill.set_gauges("0", waiting=6, running=2, kv_usage=0.1)
    decode.set_gauges("0", waiting=0, running=40, kv_usage=0.7)
    router = RouterMetrics(lambda: [])
    accepts: list[str] = []
    prefill_server = await aiohttp_server(page_app(prefill.render, accepts))
    # a decode engine that serves OpenMetrics (underscores) whatever it is asked
    decode_server = await aiohttp_server(page_app(lambda: decode.render(openmetrics=True)))
    router_server = await aiohttp_server(page_app(lambda: router.render().decode()))
    html_server = await aiohttp_server(page_app(lambda: "<html>not metrics</html>\n"))
    broken_server = await aiohttp_server(page_app(lambda: "vllm:num_requests_waiting{x=\n"))
    pools = {
        "prefill": PoolTargets(
            replicas=2,
            ready=2,
            pods={
                "prefill-0": str(prefill_server.make_url("/metrics")),
                "prefill-1": metrics_url("127.0.0.1", closed_port()),
            },
        ),
        "decode": PoolTargets(
            replicas=5,
            ready=5,
            pods={
                "decode-0": str(decode_server.make_url("/metrics")),
                "decode-slow": hanging_url,
                "decode-500": error_url,
                "decode-html": str(html_server.make_url("/metrics")),
                "decode-broken": str(broken_server.make_url("/metrics")),
            },
        ),
    }
    routers = {"router-0": str(router_server.make_url("/metrics"))}
    clock = FakeClock()
    scraper = Scraper(session, timeout_s=0.3, clock=clock)

    first = await scraper.observe(pools, routers)
    assert first.window_s == 0 and first.now_s == 1000
    assert first.pools["prefill"].rated == 0 and first.pools["prefill"].scraped == 1

    prefill.add_work("0", prompt_tokens=3000, ttft_s=[0.3] * 4)
    decode.add_work("0", generation_tokens=1500, itl_s=[0.03] * 10)
    router.for_class("gold").ttft.observe(0.45)
    router.requests.labels("gold", "200").inc(30)
    clock.now_s += 15
    second = await scraper.observe(pools, routers)

    assert second.window_s == 15
    p, d = second.pools["prefill"], second.pools["decode"]
    assert p.waiting_requests == 6 and p.kv_capacity_tokens == 16000
    assert p.prompt_tokens_per_s == pytest.approx(3000 / 15)
    assert p.latency is not None and p.latency.ttft_s[50] == pytest.approx(0.375)
    assert "ClientConnectorError" in p.failed["prefill-1"]
    assert not p.available
    assert d.scraped == 1 and d.running_requests == 40 and d.kv_usage == 0.7
    assert d.generation_tokens_per_s == pytest.approx(100)
    assert d.latency is not None and d.latency.itl_s[50] == pytest.approx(0.0375)
    assert "within 0.3 s" in d.failed["decode-slow"]
    assert "HTTP 500" in d.failed["decode-500"]
    assert "lacks vllm:num_requests_waiting" in d.failed["decode-html"]
    assert "unreadable metrics page: line 1" in d.failed["decode-broken"]
    gold = second.latency_by_class["gold"]
    assert gold.source == "router" and gold.requests == 1
    assert gold.requests_per_s == pytest.approx(2.0)
    assert second.errors == ()
    assert accepts and all(a.startswith("text/plain") for a in accepts)


async def test_scraper_forgets_removed_pods_and_owns_its_session(
    aiohttp_server: ServerFactory,
) -> None:
    engine = VllmMetrics()
    server = await aiohttp_server(page_app(engine.render))
    url = str(server.make_url("/metrics"))
    clock = FakeClock()
    async with Scraper(clock=clock) as scraper:
        await scraper.observe({"pool": PoolTargets(1, 1, {"a": url})})
        clock.now_s += 10
        await scraper.observe({"pool": PoolTargets(1, 1, {"b": url})})  # "a" went away
        clock.now_s += 10
        again = await scraper.observe({"pool": PoolTargets(1, 1, {"a": url})})
    assert again.pools["pool"].rated == 0  # "a" is new again: no stale previous sample
    assert again.pools["pool"].scraped == 1
    router_down = Scraper(clock=clock)
    try:
        obs = await router_down.observe({}, {"router-0": metrics_url("127.0.0.1", closed_port())})
    finally:
        await router_down.aclose()
    assert obs.errors and obs.errors[0].startswith("router pod router-0: ClientConnectorError")
