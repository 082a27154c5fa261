"""An OTLP/HTTP trace collector on loopback for the contract tests: real engines started
with ``--otlp-traces-endpoint`` send it their spans, and so may a tracing router. Does I/O
(an aiohttp server on a thread of its own, so the engines' exporters reach it whatever the
tests' event loops do).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.vllm.engines import free_port


@dataclass(frozen=True)
class Span:
    """One received span, ids as lowercase hex."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str


class Collector:
    """Spans received at ``url`` (``/v1/traces``), kept in arrival order."""

    def __init__(self) -> None:
        self.port = free_port()
        self.spans: list[Span] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._serve, name="otlp-collector", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the OTLP collector did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def receive(request: web.Request) -> web.Response:
            batch = ExportTraceServiceRequest.FromString(await request.read())
            received = []
            for resource_spans in batch.resource_spans:
                service = next((a.value.string_value for a in resource_spans.resource.attributes
                                if a.key == "service.name"), "")  # fmt: skip
                for scope in resource_spans.scope_spans:
                    received += [Span(service, s.name, s.trace_id.hex(), s.span_id.hex(),
                                      s.parent_span_id.hex()) for s in scope.spans]  # fmt: skip
            with self._lock:
                self.spans.extend(received)
            return web.Response(status=200, content_type="application/x-protobuf")

        async def start() -> None:
            app = web.Application(client_max_size=64 * 1024**2)
            app.router.add_post("/v1/traces", receive)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def wait_for(self, found: Callable[[list[Span]], bool], timeout_s: float = 30.0) -> bool:
        """Whether ``found(spans)`` holds within ``timeout_s`` (exporters batch for seconds)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if found(list(self.spans)):
                    return True
            time.sleep(0.2)
        return False

    def close(self) -> None:
        async def stop() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
