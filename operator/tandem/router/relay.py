"""The generating leg (decode, or the aggregated pool), relayed to the client. Does HTTP I/O.

Before the first byte reaches the client a failure is retried once on another engine;
on a decode retry the KV the prefill engine holds is reused only if it can be trusted
(:func:`tandem.router.protocol.decide_kv_reusable`), else prefill runs again. After the
first byte the client has a 200 status line, so a broken stream ends with an SSE error
event (and ``[DONE]``, except for the Responses API, whose streams have none): the client
always sees an end. The engine's bytes are relayed
unchanged; a client that goes away closes the engine connection, which makes the
engine abort the request and free its KV.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web

from tandem.router.legs import PATHS, Exchange, choose, run_prefill
from tandem.router.protocol import (
    StreamEnd,
    build_decode_body,
    build_sse_error,
    decide_kv_reusable,
)
from tandem.router.responses import error_response, passthrough_response
from tandem.router.selection import Endpoint
from tandem.router.upstream import (
    Passthrough,
    StallGuard,
    StallTimeout,
    UpstreamFailure,
    classify,
    open_stream,
)


async def run_generation(
    ex: Exchange, request: web.Request, kv_params: dict[str, object] | None
) -> web.StreamResponse:
    """The answer to the client: from one engine, or a second after a failure."""
    role = "pool" if ex.config.mode == "aggregated" else "decode"
    failure: UpstreamFailure | None = None
    for attempt in range(2):
        endpoint = await choose(ex, role)
        if endpoint is None:
            break
        if attempt:
            ex.router.metrics.retries.labels(role).inc()
        ex.mark_dispatch()
        try:
            return await relay_once(ex, request, endpoint, kv_params)
        except UpstreamFailure as err:
            failure = err
            endpoint.record_failure(asyncio.get_running_loop().time())
        if (
            attempt == 0
            and kv_params is not None
            and not decide_kv_reusable(
                kv_params, delivered=failure.delivered, now_epoch_s=time.time()
            )
        ):
            ex.attempt += 1
            ex.tried.pop("prefill", None)
            again = await run_prefill(ex)
            if isinstance(again, Passthrough):
                ex.code = again.status
                return passthrough_response(again, ex.request_id)
            kv_params = again.kv_params
    if failure is None:
        ex.code = 503
        return error_response(
            503, f"no ready {role} engine", request_id=ex.request_id, retry_after_s=1
        )
    ex.code = failure.status
    return error_response(failure.status, failure.message, request_id=ex.request_id)


async def relay_once(
    ex: Exchange,
    request: web.Request,
    endpoint: Endpoint,
    kv_params: dict[str, object] | None,
) -> web.StreamResponse:
    """One engine's answer to the client; :class:`UpstreamFailure` if nothing was sent yet."""
    router, timeouts = ex.router, ex.config.timeouts
    body = build_decode_body(ex.parsed.body, kv_params, ex.priority)
    queued_tokens = ex.parsed.prompt_tokens if endpoint.role == "pool" else 0
    endpoint.outstanding_requests += 1
    endpoint.outstanding_prompt_tokens += queued_tokens
    resp: aiohttp.ClientResponse | None = None
    complete = False
    leg = ex.trace.leg(endpoint.role, endpoint.url, ex.attempt)
    if kv_params is not None:
        leg.start_handoff()
    failure: str | None = "cancelled"
    try:
        try:
            with StallGuard(timeouts.first_token_s, timeouts.idle_stream_s) as guard:
                resp = await open_stream(
                    router.session,
                    endpoint.url + PATHS[ex.parsed.kind],
                    body,
                    leg.headers(ex.leg_headers()),
                    guard,
                    client_timeout=router.client_timeout,
                )
                content_type = resp.headers.get("Content-Type", "application/json")
                if resp.status != 200 or not ex.parsed.stream:
                    guard.touch()
                    leg.first_byte()  # a whole answer's head comes when it is done
                    raw = await _read_all(resp, endpoint.url)
                    complete = True
                    answer = classify(endpoint.url, resp.status, raw, content_type)
                    failure = None
                    if isinstance(answer, Passthrough):
                        ex.code = answer.status
                        return passthrough_response(answer, ex.request_id)
                    endpoint.record_success()
                    ex.code = resp.status
                    return web.Response(
                        body=answer,
                        status=resp.status,
                        headers={"Content-Type": content_type, "X-Request-Id": ex.request_id},
                    )
                first = await _read_chunk(resp, endpoint.url)
                leg.first_byte()
        except StallTimeout:
            raise UpstreamFailure(
                f"{endpoint.url}: no first byte within {timeouts.first_token_s:g} s",
                delivered=True,
                timed_out=True,
            ) from None
        if not first or first.startswith((b'data: {"error"', b"event: error")):
            raise UpstreamFailure(
                f"{endpoint.url} ended its stream before the first token: {first[:200]!r}",
                delivered=True,
            )
        endpoint.outstanding_prompt_tokens -= queued_tokens
        queued_tokens = 0
        client, complete = await stream_to_client(ex, request, resp, endpoint, first, content_type)
        failure = None
        if not complete:
            failure = f"the stream ended with {ex.code}"
            if ex.code != 499:
                ex.trace.fail(failure)
        return client
    except UpstreamFailure as err:
        failure = err.message
        raise
    finally:
        leg.end(None if resp is None else resp.status, failure)
        endpoint.outstanding_requests -= 1
        endpoint.outstanding_prompt_tokens -= queued_tokens
        if resp is not None:
            if complete:
                resp.release()
            else:
                resp.close()


async def stream_to_client(
    ex: Exchange,
    request: web.Request,
    resp: aiohttp.ClientResponse,
    endpoint: Endpoint,
    first: bytes,
    content_type: str,
) -> tuple[web.StreamResponse, bool]:
    """Relay a stream whose first chunk arrived; also whether the engine's answer was whole.

    ``ex.code`` ends as 200, 502 or 504 (the stream broke and got an SSE error event)
    or 499 (the client went away first).
    """
    loop = asyncio.get_running_loop()
    idle_s = ex.config.timeouts.idle_stream_s
    client = web.StreamResponse(
        status=resp.status,
        headers={
            "Content-Type": content_type,
            "Cache-Control": "no-cache",
            "X-Request-Id": ex.request_id,
        },
    )
    ex.code = 499  # until the client has had the whole answer
    await client.prepare(request)
    await client.write(first)
    now = last = loop.time()
    ex.class_metrics.ttft.observe(now - ex.arrival_s)
    if ex.prefill_done_s is not None:
        ex.router.metrics.kv_handoff.observe(now - ex.prefill_done_s)
    itl = ex.class_metrics.itl
    end = StreamEnd(ex.parsed.kind)
    end.feed(first)
    broken: tuple[int, str] | None = None
    try:
        with StallGuard(idle_s, idle_s) as guard:
            while True:
                try:
                    chunk = await resp.content.readany()
                except (aiohttp.ClientError, OSError) as err:
                    broken = 502, f"{endpoint.url} broke off the stream: {type(err).__name__}"
                    break
                if not chunk:
                    break
                guard.touch()
                try:
                    await client.write(chunk)
                except (ConnectionError, aiohttp.ClientConnectionError):
                    return client, False
                now = loop.time()
                itl.observe(now - last)
                last = now
                end.feed(chunk)
    except StallTimeout:
        broken = 504, f"{endpoint.url} sent nothing for {idle_s:g} s"
    complete = broken is None and end.complete
    if not complete:
        endpoint.record_failure(loop.time())
        status, message = broken or (502, f"{endpoint.url} ended the stream before its end")
        error = build_sse_error(
            message, status=status, after_partial_event=end.partial, kind=ex.parsed.kind
        )
        try:
            await client.write(error)
        except (ConnectionError, aiohttp.ClientConnectionError):
            return client, False
        ex.code = status
    else:
        endpoint.record_success()
        ex.code = 200
    try:
        await client.write_eof()
    except (ConnectionError, aiohttp.ClientConnectionError):
        ex.code = 499
    return client, complete


async def _read_all(resp: aiohttp.ClientResponse, url: str) -> bytes:
    try:
        return await resp.read()
    except (aiohttp.ClientError, OSError) as err:
        raise UpstreamFailure(
            f"{url} failed: {type(err).__name__}: {err}", delivered=True
        ) from None


async def _read_chunk(resp: aiohttp.ClientResponse, url: str) -> bytes:
    try:
        return await resp.content.readany()
    except (aiohttp.ClientError, OSError) as err:
        raise UpstreamFailure(
            f"{url} failed: {type(err).__name__}: {err}", delivered=True
        ) from None
