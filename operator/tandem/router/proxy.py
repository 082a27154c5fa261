"""HTTP handlers: the OpenAI endpoints, ``/health`` and ``/metrics``. Does HTTP I/O.

A generation request (completions, chat, Responses) goes: class (header, and the API key
when the class needs one) → body, read whole under its deadline → admission → parse →
prefill leg (disaggregated mode, unless the prompt is short, the decode engine must
judge the body or a decode engine absorbs the request) → decode leg, relayed. Every
outcome is counted once in ``tandem_router_requests_total{class,code}``.

Every answer carries ``X-Request-Id`` (:func:`request_ids`, a middleware): the client's
own when it sent a sane one, else a fresh one, also on answers the router makes before
a handler knows anything about the request (429, 413, an unknown path).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from aiohttp.http import HttpProcessingError

from tandem.engine.server.errors import ApiError
from tandem.router.classes import (
    REASON_BODY_TIMEOUT,
    REASON_BODY_TOO_LARGE,
    REASON_CLASS_KEY,
    REASON_UNKNOWN_CLASS,
    ClassDenied,
    UnknownClass,
    resolve_class,
)
from tandem.router.config import RouterConfig
from tandem.router.keys import parse_bearer
from tandem.router.legs import Exchange, absorb, new_request_id, run_prefill
from tandem.router.relay import run_generation
from tandem.router.request import CHARS_PER_TOKEN, Kind, parse_request
from tandem.router.responses import api_error_response, error_response, passthrough_response
from tandem.router.state import Router
from tandem.router.tracing import TRACE_HEADERS, request_trace
from tandem.router.upstream import Passthrough

ROUTER: web.AppKey[Router] = web.AppKey("router", Router)
#: The request's id, set by :func:`request_ids` before any handler runs.
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id", str)
log = logging.getLogger("tandem.router")
#: Class label for requests naming an undeclared class (never the client's string,
#: which would let clients create label values without bound).
UNKNOWN_CLASS_LABEL = "unknown"
#: Client headers both legs carry besides its credentials: its W3C trace context (vLLM
#: reads it; a tracing router sends its own span's instead).
FORWARDED_HEADERS = TRACE_HEADERS


@web.middleware
async def request_ids(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Give the request its id and put it on whatever answer comes back."""
    request_id = new_request_id(request.headers.get("X-Request-Id"))
    request[REQUEST_ID] = request_id
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        exc.headers.setdefault("X-Request-Id", request_id)
        raise
    if not response.prepared:
        response.headers.setdefault("X-Request-Id", request_id)
    return response


async def handle_completions(request: web.Request) -> web.StreamResponse:
    return await handle_generate(request, "completions")


async def handle_chat(request: web.Request) -> web.StreamResponse:
    return await handle_generate(request, "chat")


async def handle_responses(request: web.Request) -> web.StreamResponse:
    return await handle_generate(request, "responses")


async def handle_generate(request: web.Request, kind: Kind) -> web.StreamResponse:
    router = request.app[ROUTER]
    config = router.config
    arrival_s = asyncio.get_running_loop().time()
    metrics = router.metrics
    authorization = request.headers.get("Authorization")
    granted = router.class_keys.classes_of(parse_bearer(authorization))
    klass = resolve_class(request.headers.get(config.priority_header), config, granted)
    if isinstance(klass, UnknownClass):
        metrics.rejections.labels(UNKNOWN_CLASS_LABEL, REASON_UNKNOWN_CLASS).inc()
        metrics.requests.labels(UNKNOWN_CLASS_LABEL, "400").inc()
        return error_response(400, klass.message, param=config.priority_header)
    if isinstance(klass, ClassDenied):
        metrics.rejections.labels(klass.name, REASON_CLASS_KEY).inc()
        metrics.requests.labels(klass.name, str(klass.status)).inc()
        return error_response(klass.status, klass.message, param=config.priority_header)
    if (request.content_length or 0) > config.max_body_bytes:
        return _too_large(router, klass.name)
    try:
        raw = await _read_body(request, config, klass.name)
    except asyncio.CancelledError:
        metrics.requests.labels(klass.name, "499").inc()  # the client went away
        raise
    if isinstance(raw, web.Response):
        metrics.requests.labels(klass.name, str(raw.status)).inc()
        return raw
    reason = router.admission.try_admit(klass, config)
    if reason is not None:
        metrics.rejections.labels(klass.name, reason).inc()
        metrics.requests.labels(klass.name, "429").inc()
        limit = klass.max_inflight if reason != "max_inflight" else config.max_inflight
        return error_response(
            429,
            f"too many requests in flight ({reason}: {limit}); retry later",
            retry_after_s=config.retry_after_s,
        )
    code = 499  # a cancellation (the client went away) leaves it so
    request_id = request[REQUEST_ID]
    try:
        try:
            parsed = parse_request(
                raw, kind, prefix_chars=config.prefix_affinity_tokens * CHARS_PER_TOKEN
            )
        except ApiError as err:
            code = err.status
            return api_error_response(err, request_id)
        router.prompt_sizes.add(parsed.prompt_tokens)
        headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
        if authorization is not None and not granted:  # a class key stays in the router
            headers["Authorization"] = authorization
        for name in FORWARDED_HEADERS:
            if name in request.headers:
                headers[name] = request.headers[name]
        ex = Exchange(
            router=router,
            config=config,
            klass=klass,
            class_metrics=metrics.for_class(klass.name),
            parsed=parsed,
            request_id=request_id,
            headers=headers,
            arrival_s=arrival_s,
            trace=request_trace(request),
        )
        kv_params = None
        prefill_leg = (
            config.mode == "disaggregated"
            and not parsed.skip_prefill
            and parsed.prompt_tokens >= config.short_prompt_tokens
        )
        if prefill_leg and not absorb(ex):
            prefill = await run_prefill(ex)
            if isinstance(prefill, Passthrough):
                code = prefill.status
                return passthrough_response(prefill, request_id)
            kv_params = prefill.kv_params
        response = await run_generation(ex, request, kv_params)
        code = ex.code
        if 200 <= code < 300:
            ex.class_metrics.e2e.observe(asyncio.get_running_loop().time() - arrival_s)
        return response
    finally:
        router.admission.release(klass)
        metrics.requests.labels(klass.name, str(code)).inc()


def _too_large(router: Router, klass: str, *, count_request: bool = True) -> web.Response:
    limit = router.config.max_body_bytes
    router.metrics.rejections.labels(klass, REASON_BODY_TOO_LARGE).inc()
    if count_request:
        router.metrics.requests.labels(klass, "413").inc()
    return error_response(413, f"request body larger than {limit} bytes")


async def _read_body(
    request: web.Request, config: RouterConfig, klass: str
) -> bytes | web.Response:
    """The whole body, read before admission under ``request_body_s``; else the answer
    that refuses it: 413 once it passes ``max_body_bytes`` (chunked bodies included), 408
    when it does not arrive in time, 400 when its framing is broken.

    Before admission, so a client that trickles its body holds a connection (bounded per
    address, :mod:`tandem.router.connections`) but never an admission slot."""
    router_metrics = request.app[ROUTER].metrics
    parts: list[bytes] = []
    size = 0
    deadline_s = config.timeouts.request_body_s
    try:
        async with asyncio.timeout(deadline_s):
            async for chunk in request.content.iter_any():
                size += len(chunk)
                if size > config.max_body_bytes:
                    return _too_large(request.app[ROUTER], klass, count_request=False)
                parts.append(chunk)
    except TimeoutError:
        router_metrics.rejections.labels(klass, REASON_BODY_TIMEOUT).inc()
        answer = error_response(408, f"request body not received within {deadline_s:g} s")
        answer.force_close()
        return answer
    except (web.RequestPayloadError, HttpProcessingError) as err:
        # broken chunked framing, a body shorter than its Content-Length at EOF
        message = getattr(err, "message", None) or type(err).__name__
        answer = error_response(400, f"malformed request body: {message}")
        answer.force_close()
        return answer
    return b"".join(parts)


async def handle_models(request: web.Request) -> web.StreamResponse:
    """``GET /v1/models`` from a generating engine (decode or pool), retried once."""
    router = request.app[ROUTER]
    role = router.roles()[-1]
    failure = f"no ready {role} engine"
    tried: set[str] = set()
    for _ in range(2):
        endpoint = pick_engine(router, role, tried)
        if endpoint is None:
            break
        try:
            async with asyncio.timeout(router.config.timeouts.connect_s * 2):
                async with router.session.get(endpoint + "/v1/models") as resp:
                    raw = await resp.read()
                    if resp.status < 500:
                        return web.Response(
                            status=resp.status,
                            body=raw,
                            headers={
                                "Content-Type": resp.headers.get("Content-Type", "application/json")
                            },
                        )
                    failure = f"the {role} engine failed (HTTP {resp.status})"
                    detail = f"answered {resp.status}"
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            failure = f"the {role} engine could not be asked ({type(err).__name__})"
            detail = f"{type(err).__name__}: {err}"
        log.warning("request %s: /v1/models from %s: %s", request[REQUEST_ID], endpoint, detail)
    return error_response(503, failure, retry_after_s=router.config.retry_after_s)


def pick_engine(router: Router, role: str, tried: set[str]) -> str | None:
    """A healthy engine of ``role`` not tried yet (any untried one if none is healthy)."""
    now_s = asyncio.get_running_loop().time()
    members = [e for e in router.pools[role].members() if e.url not in tried]
    healthy = [e for e in members if e.healthy(now_s)] or members
    if not healthy:
        return None
    url = router.rng.choice(healthy).url
    tried.add(url)
    return url


async def handle_health(request: web.Request) -> web.Response:
    """Liveness: 200 while the router serves; the body says which pools have engines.

    Deliberately not 503 when a pool is empty: the kubelet would restart a healthy
    router while engines load weights, which changes nothing.
    """
    router = request.app[ROUTER]
    pools = {role: len(router.pools[role]) for role in router.roles()}
    body = {"status": "ok", "mode": router.config.mode, "endpoints": pools}
    return web.Response(text=json.dumps(body), content_type="application/json")


async def handle_metrics(request: web.Request) -> web.Response:
    router = request.app[ROUTER]
    return web.Response(
        body=router.metrics.render(), headers={"Content-Type": router.metrics.content_type}
    )
