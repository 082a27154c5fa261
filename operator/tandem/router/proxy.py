"""HTTP handlers: the OpenAI endpoints, ``/health`` and ``/metrics``. Does HTTP I/O.

A generation request goes: class (header) → body size → admission → parse → prefill
leg (disaggregated mode, unless the prompt is short or a decode engine absorbs it) →
decode leg, relayed. Every outcome is counted once in
``tandem_router_requests_total{class,code}``.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
from aiohttp import web

from tandem.router.classes import (
    REASON_BODY_TOO_LARGE,
    REASON_UNKNOWN_CLASS,
    UnknownClass,
    resolve_class,
)
from tandem.router.legs import Exchange, absorb, new_request_id, run_prefill
from tandem.router.protocol import CHARS_PER_TOKEN, Kind, RequestError, parse_request
from tandem.router.relay import run_generation
from tandem.router.responses import error_response, passthrough_response
from tandem.router.state import Router
from tandem.router.upstream import Passthrough

ROUTER: web.AppKey[Router] = web.AppKey("router", Router)
#: Class label for requests naming an undeclared class (never the client's string,
#: which would let clients create label values without bound).
UNKNOWN_CLASS_LABEL = "unknown"


async def handle_completions(request: web.Request) -> web.StreamResponse:
    return await handle_generate(request, "completions")


async def handle_chat(request: web.Request) -> web.StreamResponse:
    return await handle_generate(request, "chat")


async def handle_generate(request: web.Request, kind: Kind) -> web.StreamResponse:
    router = request.app[ROUTER]
    config = router.config
    arrival_s = asyncio.get_running_loop().time()
    metrics = router.metrics
    klass = resolve_class(request.headers.get(config.priority_header), config)
    if isinstance(klass, UnknownClass):
        metrics.rejections.labels(UNKNOWN_CLASS_LABEL, REASON_UNKNOWN_CLASS).inc()
        metrics.requests.labels(UNKNOWN_CLASS_LABEL, "400").inc()
        return error_response(400, klass.message, param=config.priority_header)
    if (request.content_length or 0) > config.max_body_bytes:
        return _too_large(router, klass.name)
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
    request_id = new_request_id(request.headers.get("X-Request-Id"))
    try:
        raw = await _read_body(request, config.max_body_bytes)
        if raw is None:
            code = 413
            return _too_large(router, klass.name, count_request=False)
        try:
            parsed = parse_request(
                raw, kind, prefix_chars=config.prefix_affinity_tokens * CHARS_PER_TOKEN
            )
        except RequestError as err:
            code = err.status
            return error_response(err.status, err.message, request_id=request_id, param=err.param)
        router.prompt_sizes.add(parsed.prompt_tokens)
        headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        ex = Exchange(
            router=router,
            config=config,
            klass=klass,
            class_metrics=metrics.for_class(klass.name),
            parsed=parsed,
            request_id=request_id,
            headers=headers,
            arrival_s=arrival_s,
        )
        kv_params = None
        prefill_leg = (
            config.mode == "disaggregated" and parsed.prompt_tokens >= config.short_prompt_tokens
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


async def _read_body(request: web.Request, limit: int) -> bytes | None:
    """The body, or ``None`` once it passes ``limit`` bytes (chunked bodies included)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


async def handle_models(request: web.Request) -> web.StreamResponse:
    """``GET /v1/models`` from a generating engine (decode or pool), retried once."""
    router = request.app[ROUTER]
    role = router.roles()[-1]
    failure = "no ready engine"
    tried: set[str] = set()
    for _ in range(2):
        endpoint = await _pick_any(router, role, tried)
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
                    failure = f"{endpoint} answered {resp.status}"
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            failure = f"{endpoint}: {type(err).__name__}"
    return error_response(503, failure, retry_after_s=1)


async def _pick_any(router: Router, role: str, tried: set[str]) -> str | None:
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
