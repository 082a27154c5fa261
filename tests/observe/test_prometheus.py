"""The Prometheus source against a real Prometheus server scraping loopback pods."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client.exposition import choose_encoder

from tandem.observe.histogram import compute_quantile
from tandem.observe.parse import parse_engine_sample
from tandem.observe.prometheus import PrometheusSource, fetch_query
from tandem.observe.promql import PromTarget
from tandem.observe.source import PoolTargets
from tandem.observe.types import Observation
from tandem.router.metrics import RouterMetrics
from tests.observe.prometheus_server import running_prometheus
from tests.observe.vllm_metrics import VllmMetrics

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
DATA_TIMEOUT_S = 30.0
WINDOW_S = 5.0


def metrics_app(
    registry_page: Callable[[str], tuple[bytes, str]], on_scrape: Callable[[], None]
) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        on_scrape()
        body, content_type = registry_page(request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


def negotiated(engine: VllmMetrics) -> Callable[[str], tuple[bytes, str]]:
    """What vLLM does: OpenMetrics (underscores) when Prometheus asks for it."""

    def page(accept: str) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        return encoder(engine.registry), content_type

    return page


def plain(render: Callable[[], str]) -> Callable[[str], tuple[bytes, str]]:
    """Always the classic text format (colons), whatever is asked."""
    return lambda accept: (render().encode(), "text/plain; version=0.0.4; charset=utf-8")


def address(server: TestServer) -> str:
    return f"127.0.0.1:{server.port}"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def labels(pool: str, pod: str, namespace: str = "prod") -> dict[str, str]:
    return {
        "namespace": namespace,
        "service": "chat",
        "pool": pool,
        "pod": pod,
    }


def has_data(obs: Observation) -> bool:
    p, d = obs.pools["prefill"], obs.pools["decode"]
    gold = obs.latency_by_class.get("gold")
    return (
        p.rated == 1
        and d.rated == 2
        and "decode-2" in d.failed
        and p.latency is not None
        and 50 in p.latency.ttft_s
        and d.latency is not None
        and 50 in d.latency.itl_s
        and gold is not None
        and 50 in gold.ttft_s
        and 50 in gold.itl_s
        and bool(gold.requests_per_s)
        and 50 in gold.queueing_ratio
        and bool(gold.infeasible_requests)
        and obs.absorbed_prompt_tokens_per_s > 0
    )


async def test_prometheus_source_reads_what_the_pods_serve(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    prefill, decode0, decode1, static = VllmMetrics(), VllmMetrics(), VllmMetrics(), VllmMetrics()
    prefill.set_gauges("0", waiting=7, running=3, kv_usage=0.2)
    decode0.set_gauges("0", waiting=1, running=30, kv_usage=0.6)
    decode1.set_gauges("0", waiting=0, running=20, kv_usage=0.8)
    static.add_work("0", ttft_s=[0.002, 0.03, 0.03, 0.07, 0.2, 0.3, 0.6, 1.5, 3.0, 30.0])
    router = RouterMetrics(lambda: [])
    gold = router.for_class("gold")

    def prefill_work() -> None:  # every scrape: the same work, so ratios are exact
        prefill.add_work("0", prompt_tokens=100, generation_tokens=10, ttft_s=[0.3])

    def decode_work(engine: VllmMetrics) -> Callable[[], None]:
        return lambda: engine.add_work("0", generation_tokens=50, itl_s=[0.03])

    def router_work() -> None:
        gold.ttft.observe(0.45)
        gold.itl.observe(0.03)
        gold.queueing.observe(0.3)
        gold.absorbed.inc()
        gold.absorbed_tokens.inc(800)
        router.infeasible.labels("gold", "ttft").inc()
        router.requests.labels("gold", "200").inc()
        router.requests.labels("gold", "503").inc()

    servers = {
        "prefill-0": await aiohttp_server(metrics_app(negotiated(prefill), prefill_work)),
        "decode-0": await aiohttp_server(metrics_app(plain(decode0.render), decode_work(decode0))),
        "decode-1": await aiohttp_server(metrics_app(negotiated(decode1), decode_work(decode1))),
        "router-0": await aiohttp_server(
            metrics_app(plain(lambda: router.render().decode()), router_work)
        ),
        "static-0": await aiohttp_server(metrics_app(negotiated(static), lambda: None)),
    }
    targets = [
        (address(servers["prefill-0"]), labels("prefill", "prefill-0")),
        (address(servers["decode-0"]), labels("decode", "decode-0")),
        (address(servers["decode-1"]), labels("decode", "decode-1")),
        (f"127.0.0.1:{closed_port()}", labels("decode", "decode-2")),
        (address(servers["router-0"]), labels("router", "router-0")),
        (address(servers["static-0"]), labels("prefill", "static-0", namespace="other")),
    ]
    pools = {
        "prefill": PoolTargets(1, 1, {"prefill-0": ""}),
        "decode": PoolTargets(3, 3, {"decode-0": "", "decode-1": "", "decode-2": ""}),
    }
    routers = {"router-0": ""}
    async with (
        running_prometheus(tmp_path, targets) as url,
        aiohttp.ClientSession() as session,
    ):
        source = PrometheusSource(url, PromTarget("prod", "chat"), session, window_s=WINDOW_S)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DATA_TIMEOUT_S
        obs = await source.observe(pools, routers)
        while not has_data(obs):
            if loop.time() > deadline:
                pytest.fail(f"no complete data from Prometheus in {DATA_TIMEOUT_S} s: {obs}")
            await asyncio.sleep(0.5)
            obs = await source.observe(pools, routers)

        assert not [e for e in obs.errors if "failed" in e], obs.errors  # all PromQL is valid
        p, d = obs.pools["prefill"], obs.pools["decode"]
        assert (p.scraped, p.waiting_requests, p.running_requests) == (1, 7, 3)
        assert p.kv_usage == pytest.approx(0.2) and p.kv_capacity_tokens == 16 * 1000
        assert p.available and p.rates_available
        assert p.prompt_tokens_per_s > 0
        assert p.prompt_tokens_per_s / p.generation_tokens_per_s == pytest.approx(10)
        assert p.latency is not None
        assert p.latency.ttft_s[50] == pytest.approx(0.25 + 0.25 * 0.5)
        assert p.latency.ttft_s[90] == pytest.approx(0.25 + 0.25 * 0.9)
        assert p.latency.ttft_mean_s == pytest.approx(0.3)  # exact: from _sum and _count

        assert d.scraped == 2 and d.running_requests == 50 and d.waiting_requests == 1
        assert d.kv_usage == pytest.approx(0.7) and d.kv_usage_max == pytest.approx(0.8)
        assert d.failed == {"decode-2": "Prometheus reports the target down (up == 0)"}
        assert not d.available
        assert d.generation_tokens_per_s > 0 and d.prompt_tokens_per_s == 0
        assert d.latency is not None and d.latency.itl_s[50] == pytest.approx(0.0375)
        assert d.latency.itl_mean_s == pytest.approx(0.03)

        gold_obs = obs.latency_by_class["gold"]
        assert gold_obs.source == "router"
        assert gold_obs.ttft_s[50] == pytest.approx(0.45)
        assert gold_obs.itl_s[50] == pytest.approx(0.0275)
        assert gold_obs.ttft_mean_s == pytest.approx(0.45)
        assert gold_obs.itl_mean_s == pytest.approx(0.03)
        assert gold_obs.requests_per_s is not None and gold_obs.error_requests_per_s is not None
        assert gold_obs.error_requests_per_s / gold_obs.requests_per_s == pytest.approx(0.5)
        # the feasibility accounting and the absorbed prompts, as the router exports them
        assert gold_obs.queueing_ratio[50] == pytest.approx(0.25)  # inside (0.2, 0.3]
        assert gold_obs.feasible_requests and gold_obs.feasible_requests > 0
        assert set(gold_obs.infeasible_requests) == {"ttft"}
        assert obs.absorbed_prompt_tokens_per_s / obs.absorbed_requests_per_s == pytest.approx(800)
        assert not [q for q in obs.empty_queries if "infeasible" in q or "absorbed" in q]

        # both spellings are stored, and the queries found both
        names = await fetch_query(
            session, url, 'count by (__name__) ({__name__=~"vllm.num_requests_running"})', 5
        )
        assert {row[0]["__name__"] for row in names} == {
            "vllm:num_requests_running",
            "vllm_num_requests_running",
        }

        # our percentile arithmetic agrees with PromQL's histogram_quantile
        page_hist = parse_engine_sample(static.render(), 0).ttft
        for q in (0.05, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99):
            promql = (
                f"histogram_quantile({q}, sum by (le) ("
                '{__name__=~"vllm[:_]time_to_first_token_seconds_bucket",namespace="other"}))'
            )
            ((_, theirs),) = await fetch_query(session, url, promql, 5)
            assert compute_quantile(page_hist, q) == pytest.approx(theirs, rel=1e-9), q

        # a service Prometheus has no series for: held, with the PromQL to check
        nothing = PrometheusSource(url, PromTarget("prod", "nope"), session, window_s=WINDOW_S)
        empty = await nothing.observe(pools, routers)
        assert not empty.pools["prefill"].available and empty.pools["prefill"].scraped == 0
        assert empty.empty_queries
        assert all('service="nope"' in q for q in empty.empty_queries)
        assert any("returned no series" in e for e in empty.errors)


async def test_unreachable_prometheus_is_reported_not_raised() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with PrometheusSource(url, PromTarget("prod", "chat"), timeout_s=2) as source:
        obs = await source.observe({"decode": PoolTargets(2, 2, {"d0": "", "d1": ""})})
    assert not obs.pools["decode"].available
    assert len(obs.errors) == 1 and "ClientConnectorError" in obs.errors[0]


SECRET = "instance-role-credentials-AKIA1234"


@pytest.mark.parametrize(
    "answer",
    [
        web.Response(text=f"<html>{SECRET}</html>", content_type="text/html"),
        web.json_response({"status": "error", "errorType": SECRET, "error": SECRET}),
        web.json_response(
            {
                "status": "success",
                "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, SECRET]}]},
            }
        ),
        web.json_response([SECRET]),
    ],
    ids=["html", "error-json", "bad-value", "not-an-object"],
)
async def test_a_query_is_a_get_and_no_answer_text_reaches_the_errors(
    aiohttp_server: ServerFactory, answer: web.Response
) -> None:
    """What a URL that is not Prometheus answers (a metadata service, an internal API)
    never reaches status or Events, and the operator only ever reads from it."""
    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request.method)
        return answer

    app = web.Application()
    app.router.add_route("*", "/api/v1/query", handler)
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(Exception) as err:
            await fetch_query(session, f"http://{address(server)}", "up", 2.0)
    assert seen == ["GET"]
    assert SECRET not in str(err.value), err.value
