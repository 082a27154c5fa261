"""Trace context through the router: the client's W3C headers reach both legs, and a
tracing router's spans (request, prefill, decode, KV handoff) link up, in memory and
received over real OTLP/HTTP on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tandem.router.app import Serving, build_app, start_router
from tandem.router.config import RouterConfig
from tandem.router.discovery import StaticDiscovery
from tandem.router.tracing import Tracing, TracingSettings, decide_tracing
from tests.router.conftest import MODEL, SimEngine, start_sim

BOUND_S = 30.0
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
TRACESTATE = "vendor=opaque"
PROMPT = "Tell me how a trace crosses the router. " * 10


@dataclass
class Spy:
    """A real HTTP hop in front of an engine that keeps the headers of each request."""

    target: str
    url: str = ""
    seen: list[dict[str, str]] = field(default_factory=list)
    runner: web.AppRunner | None = None

    async def start(self) -> None:
        session = aiohttp.ClientSession(auto_decompress=False)

        async def forward(request: web.Request) -> web.StreamResponse:
            self.seen.append(dict(request.headers))
            headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
            async with session.request(
                request.method,
                self.target + request.path_qs,
                data=await request.read(),
                headers=headers,
            ) as upstream:
                out = web.StreamResponse(
                    status=upstream.status,
                    headers={
                        "Content-Type": upstream.headers.get("Content-Type", "application/json")
                    },
                )
                await out.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                return out  # fmt: skip

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", forward)
        app.on_cleanup.append(lambda _: session.close())
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    def generation_headers(self) -> list[dict[str, str]]:
        return [h for h in self.seen if "traceparent" in {k.lower() for k in h}]


Start = Callable[..., Awaitable[tuple[Serving, Spy, Spy]]]


@pytest.fixture
async def traced_router() -> AsyncIterator[Start]:
    """``await start(tracing)``: a router (tracing or not) over spied sim P/D engines."""
    cleanup: list[Callable[[], Awaitable[None]]] = []

    async def start(tracing: Tracing | None) -> tuple[Serving, Spy, Spy]:
        engines: list[SimEngine] = [await start_sim("prefill"), await start_sim("decode")]
        spies = [Spy(e.url) for e in engines]
        for spy in spies:
            await spy.start()
        urls = {"prefill": [spies[0].url], "decode": [spies[1].url]}
        app = build_app(RouterConfig(scrape_interval_s=60.0), StaticDiscovery(urls), seed=1,
                        tracing=tracing)  # fmt: skip
        serving = await start_router(app, "127.0.0.1", 0, shutdown_timeout_s=1.0)
        cleanup.append(serving.stop)
        for spy in spies:
            assert spy.runner is not None
            cleanup.append(spy.runner.cleanup)
        cleanup.extend(e.stop for e in engines)
        return serving, spies[0], spies[1]

    yield start
    for stop in cleanup:
        await stop()


async def chat(serving: Serving, *, stream: bool, headers: dict[str, str]) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 4, "stream": stream}  # fmt: skip
    url = f"http://127.0.0.1:{serving.port}/v1/chat/completions"
    async with (
        asyncio.timeout(BOUND_S),
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers) as resp,
    ):
        await resp.read()
        return resp.status


def header(seen: dict[str, str], name: str) -> str | None:
    return next((v for k, v in seen.items() if k.lower() == name), None)


async def test_untraced_router_forwards_the_clients_context_to_both_legs(
    traced_router: Start,
) -> None:
    serving, prefill, decode = await traced_router(None)
    context = {"traceparent": TRACEPARENT, "tracestate": TRACESTATE}
    assert await chat(serving, stream=True, headers=context) == 200
    for spy in (prefill, decode):
        (seen,) = spy.generation_headers()
        assert header(seen, "traceparent") == TRACEPARENT
        assert header(seen, "tracestate") == TRACESTATE


async def test_spans_link_client_router_legs_and_kv_handoff(traced_router: Start) -> None:
    exporter = InMemorySpanExporter()
    tracing = Tracing(TracingSettings(endpoint=None, service_name="tandem-router"),
                      exporter=exporter)  # fmt: skip
    serving, prefill, decode = await traced_router(tracing)
    context = {"traceparent": TRACEPARENT, "tracestate": TRACESTATE}
    assert await chat(serving, stream=True, headers=context) == 200
    assert await asyncio.to_thread(tracing.flush)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"POST /v1/chat/completions", "prefill", "decode", "kv_handoff"}
    server = spans["POST /v1/chat/completions"]
    assert server.kind == SpanKind.SERVER and server.parent is not None
    assert format(server.context.trace_id, "032x") == TRACE_ID
    assert format(server.parent.span_id, "016x") == CLIENT_SPAN
    assert server.attributes is not None
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["tandem.class"] == "default"
    for leg in ("prefill", "decode"):
        span = spans[leg]
        assert span.kind == SpanKind.CLIENT and span.parent is not None
        assert span.parent.span_id == server.context.span_id
        assert span.context.trace_id == server.context.trace_id
    handoff = spans["kv_handoff"]
    assert handoff.parent is not None and handoff.parent.span_id == spans["decode"].context.span_id
    # each engine got its own leg's span as parent, and the client's trace state
    for spy, leg in ((prefill, "prefill"), (decode, "decode")):
        (seen,) = spy.generation_headers()
        expected = f"00-{TRACE_ID}-{spans[leg].context.span_id:016x}-01"
        assert header(seen, "traceparent") == expected
        assert header(seen, "tracestate") == TRACESTATE


async def test_spans_are_received_over_otlp_http(traced_router: Start) -> None:
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: web.Request) -> web.Response:
        assert request.headers["Content-Type"] == "application/x-protobuf"
        received.append(ExportTraceServiceRequest.FromString(await request.read()))
        return web.Response(status=200, content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", collect)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        endpoint = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/traces"
        tracing = Tracing(TracingSettings(endpoint=endpoint, service_name="tandem-router"))
        serving, _, _ = await traced_router(tracing)
        assert await chat(serving, stream=False, headers={}) == 200
        assert await asyncio.to_thread(tracing.flush)
    finally:
        await runner.cleanup()
    spans: dict[str, Any] = {}
    services = set()
    for batch in received:
        for resource_spans in batch.resource_spans:
            for attr in resource_spans.resource.attributes:
                if attr.key == "service.name":
                    services.add(attr.value.string_value)
            for scope in resource_spans.scope_spans:
                spans.update({s.name: s for s in scope.spans})
    assert services == {"tandem-router"}
    assert set(spans) == {"POST /v1/chat/completions", "prefill", "decode", "kv_handoff"}
    root = spans["POST /v1/chat/completions"]
    assert root.parent_span_id == b""  # no client context: the router's span is the root
    assert spans["prefill"].parent_span_id == root.span_id
    assert spans["decode"].parent_span_id == root.span_id
    assert spans["kv_handoff"].parent_span_id == spans["decode"].span_id
    assert len({s.trace_id for s in spans.values()}) == 1


def test_tracing_is_on_only_when_configured() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}
    assert decide_tracing({}, None) is None
    assert decide_tracing({"OTEL_SERVICE_NAME": "x"}, None) is None  # no endpoint anywhere
    assert decide_tracing(endpoint, None) == TracingSettings(None, "tandem-router")
    assert decide_tracing({**endpoint, "OTEL_SERVICE_NAME": "mine"}, None) == TracingSettings(
        None, None
    )
    assert decide_tracing({}, "http://c/v1/traces") == TracingSettings(
        "http://c/v1/traces", "tandem-router"
    )
    assert decide_tracing({**endpoint, "OTEL_TRACES_EXPORTER": "none"}, None) is None
    assert decide_tracing({**endpoint, "OTEL_SDK_DISABLED": "TRUE"}, None) is None
