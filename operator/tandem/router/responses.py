"""Answers the router writes itself: OpenAI-style errors and relayed engine errors.

Builds ``aiohttp.web`` responses; no other I/O.
"""

from __future__ import annotations

import json

from aiohttp import web

from tandem.engine.server.errors import ApiError
from tandem.router.protocol import build_error_body
from tandem.router.upstream import Passthrough


def error_response(
    status: int,
    message: str,
    *,
    request_id: str | None = None,
    retry_after_s: int | None = None,
    param: str | None = None,
) -> web.Response:
    """``{"error": {...}}`` with ``status``; ``Retry-After`` when the client should retry."""
    headers = {"Content-Type": "application/json"}
    if request_id is not None:
        headers["X-Request-Id"] = request_id
    if retry_after_s is not None:
        headers["Retry-After"] = str(retry_after_s)
    body = json.dumps(build_error_body(message, status=status, param=param))
    return web.Response(status=status, text=body, headers=headers)


def api_error_response(err: ApiError, request_id: str) -> web.Response:
    """An error the router answers exactly as vLLM would (its type, param and message)."""
    headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
    return web.Response(status=err.status, text=json.dumps(err.body()), headers=headers)


def passthrough_response(answer: Passthrough, request_id: str) -> web.Response:
    """An engine's 4xx, relayed as it came."""
    return web.Response(
        status=answer.status,
        body=answer.body,
        headers={"Content-Type": answer.content_type, "X-Request-Id": request_id},
    )
