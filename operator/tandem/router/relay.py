"""The generating leg (decode, or the aggregated pool), relayed to the client. Does HTTP I/O.

Before the first byte reaches the client a failure is retried once, on another engine
that is healthy now (none: no retry, the failure is the answer). On a decode retry the
KV the prefill engine holds is reused if it can be trusted
(:func:`tandem.router.protocol.decide_kv_reusable`), else prefill runs again; that
second prefill runs only once the other decode engine is known. An overloaded engine
(503 or 429) is not an error: when no other engine can take the request, the client
gets the overload as it is, 503 or 429 with ``Retry-After``.

After the first byte the client has a 200 status line, so a broken stream ends with an
SSE error event (and ``[DONE]``, except for the Responses API, whose streams have none):
the client always sees an end. The engine's bytes are
relayed unchanged; a client that goes away closes the engine connection, which makes
the engine abort the request and free its KV (vLLM's decode engine, aborting a request
before it pulled the KV, also tells the prefill engine to free its copy).

A non-streaming answer shows no bytes until it is whole, so its engine's progress (the
token counters the scraper reads) stands in for the first token: the leg fails only
once a scrape has seen no progress for the first-token timeout, or, while scrapes fail
(no evidence either way), after the idle-stream timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp
from aiohttp import web

from tandem.policy.feasibility import judge_request
from tandem.router.engine_http import EngineAnswer, EngineBrokeOff
from tandem.router.legs import PATHS, Exchange, choose, note_failure, run_prefill
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
    transport_failure,
)

log = logging.getLogger("tandem.router")

#: Engines one request may try for its generating leg: the first and one retry.
MAX_ATTEMPTS = 2


async def run_generation(
    ex: Exchange, request: web.Request, kv_params: dict[str, object] | None
) -> web.StreamResponse:
    """The answer to the client: from one engine, or a second after a failure."""
    role = "pool" if ex.config.mode == "aggregated" else "decode"
    metrics = ex.router.metrics
    failure: UpstreamFailure | None = None
    endpoint = await choose(ex, role)
    for attempt in range(MAX_ATTEMPTS):
        if endpoint is None:
            break
        ex.mark_dispatch()
        try:
            return await relay_once(ex, request, endpoint, kv_params)
        except UpstreamFailure as err:
            failure = err
            note_failure(ex, endpoint, err)
        if attempt + 1 == MAX_ATTEMPTS:
            break
        endpoint = await choose(ex, role, retry=True)
        if endpoint is None:
            break  # no other engine can take it: no retry, no second prefill
        metrics.retries.labels(role).inc()
        if kv_params is not None and not decide_kv_reusable(
            kv_params, delivered=failure.delivered, now_epoch_s=time.time()
        ):
            ex.attempt += 1
            ex.tried.pop("prefill", None)
            metrics.retries.labels("prefill").inc()
            again = await run_prefill(ex)
            if isinstance(again, Passthrough):
                ex.code = again.status
                return passthrough_response(again, ex.request_id)
            kv_params = again.kv_params
    if failure is None:
        ex.code = 503
        return error_response(
            503,
            f"no ready {role} engine",
            request_id=ex.request_id,
            retry_after_s=ex.config.retry_after_s,
        )
    ex.code = failure.status
    if failure.overloaded:
        return error_response(
            failure.status,
            f"the {role} engines have no room (the last one tried {failure.reason}); retry later",
            request_id=ex.request_id,
            retry_after_s=failure.retry_after_s or ex.config.retry_after_s,
        )
    return error_response(
        failure.status, f"the {role} engine {failure.reason}", request_id=ex.request_id
    )


async def relay_once(
    ex: Exchange,
    request: web.Request,
    endpoint: Endpoint,
    kv_params: dict[str, object] | None,
) -> web.StreamResponse:
    """One engine's answer to the client; :class:`UpstreamFailure` if nothing was sent yet."""
    router, timeouts = ex.router, ex.config.timeouts
    body = build_decode_body(ex.parsed.body, kv_params, ex.priority)
    prefills_here = endpoint.role == "pool" or ex.absorber is endpoint
    queued_tokens = ex.parsed.prompt_tokens if prefills_here else 0
    endpoint.outstanding_requests += 1
    endpoint.outstanding_prompt_tokens += queued_tokens
    absorbed_tokens = ex.parsed.prompt_tokens if ex.absorber is endpoint else 0
    endpoint.absorbed_prompt_tokens += absorbed_tokens
    resp: EngineAnswer | None = None
    complete = False
    first_s = timeouts.first_token_s
    sent_s = asyncio.get_running_loop().time()
    progress = (
        None
        if ex.parsed.stream
        else (lambda: endpoint.stall_deadline(sent_s, first_s, timeouts.idle_stream_s))
    )
    leg = ex.trace.leg(endpoint.role, endpoint.url, ex.attempt)
    if kv_params is not None:
        leg.start_handoff()
    failure: str | None = "cancelled"
    try:
        try:
            with StallGuard(first_s, timeouts.idle_stream_s, progress=progress) as guard:
                resp = await open_stream(
                    router.engines,
                    endpoint.url + PATHS[ex.parsed.kind],
                    body,
                    leg.headers(ex.leg_headers()),
                    connect_timeout_s=timeouts.connect_s,
                )
                content_type = resp.headers.get("content-type", "application/json")
                if resp.status != 200 or not ex.parsed.stream:
                    guard.touch()
                    leg.first_byte()  # a whole answer's head comes when it is done
                    raw = await _read_all(resp, endpoint.url)
                    complete = True
                    retry_after = resp.headers.get("retry-after")
                    answer = classify(endpoint.url, resp.status, raw, content_type, retry_after)
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
            # the limit that fired: the first-token timeout, or for a non-streaming leg
            # whose scrapes failed, the longer blind wait
            what = "a first token" if ex.parsed.stream else "progress"
            waited = f"{max(first_s, round(guard.waited_s, 1)):g} s"
            raise UpstreamFailure(
                f"showed no {what} within {waited}",
                detail=f"{endpoint.url}: no {what} within {waited}",
                delivered=True,
                status=504,
            ) from None
        if not first or first.startswith((b'data: {"error"', b"event: error")):
            raise UpstreamFailure(
                "ended its stream before the first token",
                detail=f"{endpoint.url} ended its stream before the first token: {first[:200]!r}",
                delivered=True,
            )
        endpoint.outstanding_prompt_tokens -= queued_tokens
        endpoint.absorbed_prompt_tokens -= absorbed_tokens
        queued_tokens = absorbed_tokens = 0
        client, complete = await stream_to_client(ex, request, resp, endpoint, first, content_type)
        failure = None
        if not complete:
            failure = f"the stream ended with {ex.code}"
            if ex.code != 499:
                ex.trace.fail(failure)
        return client
    except UpstreamFailure as err:
        failure = err.reason
        raise
    finally:
        leg.end(None if resp is None else resp.status, failure)
        endpoint.outstanding_requests -= 1
        endpoint.outstanding_prompt_tokens -= queued_tokens
        endpoint.absorbed_prompt_tokens -= absorbed_tokens
        if resp is not None:
            if complete:
                resp.release()
            else:
                resp.close()


async def stream_to_client(
    ex: Exchange,
    request: web.Request,
    resp: EngineAnswer,
    endpoint: Endpoint,
    first: bytes,
    content_type: str,
) -> tuple[web.StreamResponse, bool]:
    """Relay a stream whose first chunk arrived; also whether the engine's answer was whole.

    After the first chunk (written through aiohttp, with the head) every chunk is written
    to the client's transport from the engine connection's parser callback
    (:meth:`~tandem.router.engine_http.EngineAnswer.stream`), framed as aiohttp would;
    this coroutine wakes only when the stream ends, breaks, or the client's write buffer
    is past its high-water mark (the engine connection stops being read until the client
    drained it).

    ``ex.code`` ends as 200, 502 or 504 (the stream broke and got an SSE error event)
    or 499 (the client went away first, or stopped reading: a client that takes no
    bytes for the idle-stream timeout is cut, so it cannot hold an engine and an
    admission slot for as long as it likes).
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
    transport, writer = request.transport, request.writer
    if transport is None or transport.is_closing():
        return client, False
    last = first_s = loop.time()
    ex.class_metrics.ttft.observe(last - ex.arrival_s)
    account_first_token(ex, last)
    if ex.prefill_done_s is not None:
        ex.router.metrics.kv_handoff.observe(last - ex.prefill_done_s)
    itl = ex.class_metrics.itl
    end = StreamEnd(ex.parsed.kind)
    end.feed(first)
    broken: tuple[int, str, str] | None = None
    writing = gone = False
    role = endpoint.role
    record_gap = endpoint.record_gap if endpoint.role == "decode" else None
    chunked = getattr(writer, "chunked", False)
    high_water = transport.get_write_buffer_limits()[1]
    events = first.count(b"data: ")

    def relay(chunk: bytes) -> None:  # from the engine connection's parser
        nonlocal last, events, gone
        guard.touch()
        if transport.is_closing():
            gone = True
            resp.pause()
            return
        transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
        now = loop.time()
        itl.observe(now - last)
        if record_gap is not None:
            record_gap(now - last)
        last = now
        end.feed(chunk)
        events += chunk.count(b"data: ")
        if transport.get_write_buffer_size() > high_water:
            resp.pause()

    try:
        with StallGuard(idle_s, idle_s) as guard:
            resp.stream(relay)
            while True:
                try:
                    await resp.wait()
                except EngineBrokeOff as err:
                    broken = 502, "broke off the stream", str(err)
                    break
                if gone:
                    return client, False
                if resp.complete:
                    break
                writing = True  # paused: the client's buffer is full
                try:
                    await writer.drain()
                except ConnectionError:
                    return client, False
                writing = False
                resp.resume()
    except StallTimeout:
        if writing:
            cut_client(ex, request, f"it read nothing for {idle_s:g} s")
            return client, False
        broken = 504, f"sent nothing for {idle_s:g} s", "stalled"
    finally:
        if not resp.complete:
            resp.stop()  # nothing more reaches the client behind an error event
    if gone or transport.is_closing():
        return client, False
    complete = broken is None and end.complete
    if not complete:
        endpoint.record_failure(loop.time())
        status, reason, detail = broken or (502, "ended the stream before its end", "no end")
        log.warning("request %s: %s engine %s: %s", ex.request_id, role, endpoint.url, detail)
        event = build_sse_error(
            f"the {role} engine {reason}",
            status=status,
            after_partial_event=end.partial,
            kind=ex.parsed.kind,
        )
        try:
            async with asyncio.timeout(idle_s):
                await client.write(event)
        except (ConnectionError, aiohttp.ClientConnectionError):
            return client, False
        except TimeoutError:
            cut_client(ex, request, f"it read nothing for {idle_s:g} s")
            return client, False
        ex.code = status
    else:
        endpoint.record_success()
        ex.code = 200
        tokens = events - 2  # the [DONE] event and the first token's
        if tokens >= 1 and ex.parsed.kind != "responses":  # one event a token, and [DONE]
            ex.router.least.observe_tpot((last - first_s) / tokens, last)
    try:
        await client.write_eof()
    except (ConnectionError, aiohttp.ClientConnectionError):
        ex.code = 499
    return client, complete


def cut_client(ex: Exchange, request: web.Request, why: str) -> None:
    """Drop a client connection that stopped reading (its unsent bytes are discarded)."""
    log.warning("request %s: client %s cut off: %s", ex.request_id, request.remote, why)
    ex.code = 499
    if request.transport is not None:
        request.transport.abort()


def account_first_token(ex: Exchange, now_s: float) -> None:
    """Judge a request at its first token (:func:`~tandem.policy.feasibility.judge_request`):
    count it infeasible, or observe the share of its queueing budget it used; then learn
    from its service time."""
    metrics, router = ex.class_metrics, ex.router
    prompt = ex.prompt_tokens
    verdict = judge_request(router.least, prompt, now_s - ex.arrival_s, ex.klass.targets, now_s)
    for reason, infeasible in (("ttft", verdict.ttft_infeasible), ("itl", verdict.itl_infeasible)):
        if infeasible:
            router.metrics.infeasible.labels(ex.klass.name, reason).inc()
    if verdict.queueing_ratio is not None:
        metrics.queueing.observe(verdict.queueing_ratio)
    if verdict.target_ratio is not None:
        metrics.target_ratio.observe(verdict.target_ratio)
    if ex.dispatch_s is not None:
        router.least.observe_service(prompt, now_s - ex.dispatch_s, now_s)


async def _read_all(resp: EngineAnswer, url: str) -> bytes:
    try:
        return await resp.read()
    except OSError as err:
        raise transport_failure(url, err) from None


async def _read_chunk(resp: EngineAnswer, url: str) -> bytes:
    try:
        return await resp.first_chunk()
    except OSError as err:
        raise transport_failure(url, err) from None
