"""Trace context through the router, and the router's own spans over OTLP when configured.
Does I/O (the OpenTelemetry SDK exports from a thread of its own).

Without tracing configured, the router copies the client's W3C ``traceparent`` and
``tracestate`` headers to both legs (vLLM reads them, so its own spans join the client's
trace) and the SDK is never imported: a request pays for two header lookups.

With tracing configured, each request is a span tree exported over OTLP/HTTP (protobuf),
the child of the client's ``traceparent`` when it sent one::

    POST /v1/chat/completions   SERVER    the whole request: status, class, request id
    ├── prefill                 CLIENT    one prefill attempt; its traceparent goes to the engine
    └── decode                  CLIENT    one decode (or aggregated) attempt; ditto
        └── kv_handoff          INTERNAL  decode request sent → first byte: the KV pull
                                          and decode admission (only after a prefill)

so one trace shows router → prefill → KV → decode, and vLLM's own spans (its
``--otlp-traces-endpoint``) hang under the leg that called them.

Configuration is OpenTelemetry's own environment: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_ENDPOINT`` turns it on (or the router's ``--otlp-traces-endpoint``,
vLLM's flag name), ``OTEL_SERVICE_NAME`` (default ``tandem-router``),
``OTEL_TRACES_SAMPLER``/``OTEL_TRACES_SAMPLER_ARG`` (default: follow the client's decision,
else sample everything), ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_RESOURCE_ATTRIBUTES``...;
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` turn it off.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

log = logging.getLogger("tandem.router")

#: The W3C trace-context headers, forwarded as they came when the router does not trace.
TRACE_HEADERS = ("traceparent", "tracestate")
#: The service name of the router's spans unless ``OTEL_SERVICE_NAME`` says otherwise.
SERVICE_NAME = "tandem-router"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


@dataclass(frozen=True)
class TracingSettings:
    """Where spans go: ``endpoint`` (the flag's full traces URL) or None (the SDK reads
    the endpoint from the environment)."""

    endpoint: str | None
    service_name: str | None
    """None: ``OTEL_SERVICE_NAME`` is set and wins."""


def decide_tracing(env: Mapping[str, str], flag: str | None) -> TracingSettings | None:
    """Whether the router traces, from its environment and ``--otlp-traces-endpoint``. Pure.

    >>> decide_tracing({}, None) is None
    True
    >>> decide_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None)
    TracingSettings(endpoint=None, service_name='tandem-router')
    >>> decide_tracing({"OTEL_SDK_DISABLED": "true"}, "http://c:4318/v1/traces") is None
    True
    """
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    if flag is None and not any(env.get(name) for name in ENDPOINT_VARIABLES):
        return None
    service = None if env.get("OTEL_SERVICE_NAME") else SERVICE_NAME
    return TracingSettings(endpoint=flag, service_name=service)


class Tracing:
    """The router's tracer: an SDK provider with a batching OTLP/HTTP exporter."""

    def __init__(self, settings: TracingSettings, *, exporter: Any = None) -> None:
        """``exporter``: a span exporter to use instead of OTLP/HTTP (tests)."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=settings.endpoint)
        attributes = {"service.name": settings.service_name} if settings.service_name else {}
        self.provider: TracerProvider = TracerProvider(resource=Resource.create(attributes))
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer: Tracer = self.provider.get_tracer("tandem.router")
        self.propagator = TraceContextTextMapPropagator()

    def start_request(
        self, method: str, path: str, headers: Mapping[str, str], attributes: dict[str, Any]
    ) -> RequestTrace:
        """The server span of one request, the child of the client's trace context."""
        from opentelemetry.trace import SpanKind

        parent = self.propagator.extract(carrier=dict(headers.items()))
        span = self.tracer.start_span(
            f"{method} {path}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path, **attributes},
        )
        return RequestTrace(self, span)

    def flush(self, timeout_s: float = 5.0) -> bool:
        return bool(self.provider.force_flush(int(timeout_s * 1000)))

    def shutdown(self) -> None:
        """Export what is pending (bounded by the exporter's timeout) and stop."""
        self.provider.shutdown()


class RequestTrace:
    """The spans of one request; every method is called from the event loop."""

    __slots__ = ("_tracing", "span")

    def __init__(self, tracing: Tracing, span: Span) -> None:
        self._tracing = tracing
        self.span = span

    def leg(self, name: str, url: str, attempt: int) -> LegTrace:
        """A client span for one engine call, started now."""
        from opentelemetry.trace import SpanKind, set_span_in_context

        parts = urlsplit(url)
        span = self._tracing.tracer.start_span(
            name,
            context=set_span_in_context(self.span),
            kind=SpanKind.CLIENT,
            attributes={
                "server.address": parts.hostname or "",
                "server.port": parts.port or 80,
                "tandem.leg": name,
                "tandem.attempt": attempt,
            },
        )
        return LegTrace(self._tracing, span)

    def set(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)

    def fail(self, message: str) -> None:
        """The request failed after its status line went out (a stream that broke)."""
        from opentelemetry.trace import Status, StatusCode

        self.span.set_status(Status(StatusCode.ERROR, message))

    def end(self, status: int) -> None:
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attribute("http.response.status_code", status)
        if status >= 500:
            self.span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))
        self.span.end()


class LegTrace:
    """One engine call's span (and, for a decode leg after a prefill, its KV handoff)."""

    __slots__ = ("_handoff", "_tracing", "span")

    def __init__(self, tracing: Tracing, span: Span) -> None:
        self._tracing = tracing
        self.span = span
        self._handoff: Span | None = None

    def headers(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with this span's ``traceparent`` (and the trace's ``tracestate``)."""
        from opentelemetry.trace import set_span_in_context

        out = {k: v for k, v in base.items() if k not in TRACE_HEADERS}
        self._tracing.propagator.inject(out, context=set_span_in_context(self.span))
        return out

    def start_handoff(self) -> None:
        """The KV handoff starts: the decode request carrying prefill's params goes out."""
        from opentelemetry.trace import set_span_in_context

        self._handoff = self._tracing.tracer.start_span(
            "kv_handoff", context=set_span_in_context(self.span)
        )

    def first_byte(self) -> None:
        """The engine's first byte arrived: the KV handoff (if any) is over."""
        if self._handoff is not None:
            self._handoff.end()
            self._handoff = None
        self.span.add_event("first_byte")

    def set(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)

    def end(self, status: int | None, error: str | None = None) -> None:
        """``status``: the engine's HTTP status, None when none came; ``error``: why the
        attempt failed (marks the span as an error)."""
        from opentelemetry.trace import Status, StatusCode

        if self._handoff is not None:
            self._handoff.end()
            self._handoff = None
        if status is not None:
            self.span.set_attribute("http.response.status_code", status)
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, error))
        self.span.end()


class NoLeg:
    """An engine call when the router does not trace: the headers go as they are (the
    client's own trace context in them), and nothing is recorded."""

    __slots__ = ()

    def headers(self, base: dict[str, str]) -> dict[str, str]:
        return base

    def start_handoff(self) -> None:
        return None

    def first_byte(self) -> None:
        return None

    def set(self, key: str, value: Any) -> None:
        return None

    def end(self, status: int | None, error: str | None = None) -> None:
        return None


class NoTrace:
    """A request when the router does not trace."""

    __slots__ = ()

    def leg(self, name: str, url: str, attempt: int) -> NoLeg:
        return NO_LEG

    def set(self, key: str, value: Any) -> None:
        return None

    def fail(self, message: str) -> None:
        return None


NO_LEG = NoLeg()
NO_TRACE = NoTrace()
#: Where a traced request's :class:`RequestTrace` is kept while its handler runs.
REQUEST_TRACE: web.RequestKey[RequestTrace] = web.RequestKey("tandem_trace", RequestTrace)
#: The generation endpoints, the requests that get spans.
TRACED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/responses"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def trace_middleware(tracing: Tracing) -> Any:
    """Middleware giving each generation request its server span (only installed when the
    router traces, so an untraced router runs no extra code per request)."""

    @web.middleware
    async def trace_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in TRACED_PATHS:
            return await handler(request)
        trace = tracing.start_request(request.method, request.path, request.headers, {})
        request[REQUEST_TRACE] = trace
        status = 499  # a cancelled handler (the client went away) leaves it so
        try:
            response = await handler(request)
            status = response.status
            return response
        finally:
            trace.end(status)

    return trace_requests


def request_trace(request: web.Request) -> RequestTrace | NoTrace:
    """The trace of a request: its spans when the router traces, else nothing to record."""
    trace: RequestTrace | None = request.get(REQUEST_TRACE)
    return NO_TRACE if trace is None else trace


def build_tracing(env: Mapping[str, str], flag: str | None) -> Tracing | None:
    """The router's tracing as its environment and flag configure it, or None."""
    settings = decide_tracing(env, flag)
    if settings is None:
        return None
    tracing = Tracing(settings)
    where = settings.endpoint or next(env[v] for v in ENDPOINT_VARIABLES if env.get(v))
    log.info("tracing: spans of every request exported over OTLP/HTTP to %s", where)
    return tracing
