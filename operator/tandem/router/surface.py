"""The router's endpoints besides generation: utility calls relayed to an engine, its own
``/ping`` and ``/load``, and OpenAI-shaped JSON for what it does not serve. Does HTTP I/O.

- ``POST /tokenize``, ``POST /detokenize``, ``GET /version``: relayed, body and answer
  unchanged, to one engine of the generating pool (decode, or the aggregated pool: the
  engines whose tokenizer and version answer the client's requests); a connection
  failure or a 5xx is tried once more on another engine, a 4xx is the client's answer.
- ``GET|POST /ping``: what vLLM's ``/ping`` means (the server is up), the router's health.
- ``GET /load``: vLLM's ``{"server_load": N}``, N the requests this router has in flight.
- any other path: 404, and a known path asked with another method: 405 (with ``Allow``),
  both as ``{"error": {...}}`` (OpenAI's shape) rather than aiohttp's text.

Paths are allowed one by one, never passed through wholesale: an engine also serves
development and administration endpoints (``/sleep``, ``/collective_rpc``,
``/reset_prefix_cache`` under ``VLLM_SERVER_DEV_MODE``) that clients must not reach.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from tandem.router.legs import new_request_id
from tandem.router.protocol import build_error_body
from tandem.router.proxy import ROUTER, handle_health, pick_engine
from tandem.router.responses import error_response

log = logging.getLogger("tandem.router")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: Request headers a relayed utility call carries to the engine.
FORWARDED = ("Authorization", "Content-Type", "traceparent", "tracestate")
#: Longest path echoed in a 404 message.
MAX_SHOWN_PATH = 200


async def relay_to_engine(request: web.Request) -> web.StreamResponse:
    """A utility call (same method, path and body) answered by a generating engine."""
    router = request.app[ROUTER]
    request_id = new_request_id(request.headers.get("X-Request-Id"))
    body = await request.read() if request.can_read_body else None
    if body is not None and len(body) > router.config.max_body_bytes:
        return error_response(
            413, f"request body larger than {router.config.max_body_bytes} bytes",
            request_id=request_id,
        )  # fmt: skip
    headers = {k: request.headers[k] for k in FORWARDED if k in request.headers}
    headers["X-Request-Id"] = request_id
    role = router.roles()[-1]
    tried: set[str] = set()
    for _ in range(2):
        url = pick_engine(router, role, tried)
        if url is None:
            break
        try:
            async with (
                asyncio.timeout(router.config.timeouts.prefill_s),
                router.session.request(
                    request.method, url + request.path, data=body, headers=headers,
                    timeout=router.client_timeout,
                ) as resp,
            ):  # fmt: skip
                raw = await resp.read()
                if resp.status < 500:
                    content_type = resp.headers.get("Content-Type", "application/json")
                    return web.Response(
                        status=resp.status, body=raw,
                        headers={"Content-Type": content_type, "X-Request-Id": request_id},
                    )  # fmt: skip
                log.warning("%s %s: %s answered %d", request.method, request.path, url, resp.status)
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            log.warning("%s %s: %s failed: %r", request.method, request.path, url, err)
    return error_response(
        503, f"no {role} engine answered {request.method} {request.path}; retry later",
        request_id=request_id, retry_after_s=1,
    )  # fmt: skip


async def handle_load(request: web.Request) -> web.Response:
    """vLLM's ``/load``: requests in flight here (all classes)."""
    load = request.app[ROUTER].admission.total
    return web.Response(text=json.dumps({"server_load": load}), content_type="application/json")


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A path the router does not serve (404) or a method it does not take there (405),
    answered as OpenAI-shaped JSON."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as err:
        allowed = ", ".join(sorted(err.allowed_methods))
        message = f"{request.method} is not allowed on {request.path}; allowed: {allowed}"
        body = build_error_body(message, status=405, error_type="MethodNotAllowedError")
        return _json(405, body, request, {"Allow": allowed})
    except web.HTTPNotFound:
        path = request.path[:MAX_SHOWN_PATH]
        message = (
            f"{request.method} {path} is not served here; the router serves "
            "/v1/completions, /v1/chat/completions, /v1/responses, /v1/models, /tokenize, "
            "/detokenize, /version, /health, /ping, /load and /metrics"
        )
        return _json(404, build_error_body(message, status=404), request)


def _json(
    status: int,
    body: dict[str, object],
    request: web.Request,
    headers: dict[str, str] | None = None,
) -> web.Response:
    request_id = new_request_id(request.headers.get("X-Request-Id"))
    return web.Response(
        status=status,
        text=json.dumps(body),
        headers={"Content-Type": "application/json", "X-Request-Id": request_id, **(headers or {})},
    )


def add_surface_routes(app: web.Application) -> None:
    """The utility endpoints, ``/ping``, ``/load`` and the JSON error middleware."""
    app.router.add_post("/tokenize", relay_to_engine)
    app.router.add_post("/detokenize", relay_to_engine)
    app.router.add_get("/version", relay_to_engine)
    app.router.add_get("/ping", handle_health)
    app.router.add_post("/ping", handle_health)
    app.router.add_get("/load", handle_load)
    app.middlewares.append(json_errors)
