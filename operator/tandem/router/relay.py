"""The generating leg (decode, or the aggregated pool), relayed to the client. Does HTTP I/O.

Before the first byte reaches the client a failure is retried once on another engine;
on a decode retry the KV the prefill engine holds is reused only if it can be trusted
(:func:`tandem.router.protocol.decide_kv_reusable`), else prefill runs again. After the
first byte the client has a 200 status line, so a broken stream ends with an SSE error
event and ``[DONE]``: the client always sees an end. The engine's bytes are relayed
unchanged; a client that goes away closes the engine connection, which makes the
engine abort the request and free its KV.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web

from tandem.policy.feasibility import judge_request
from tandem.router.legs import PATHS, Exchange, choose, run_prefill
from tandem.router.protocol import build_decode_body, build_sse_error, decide_kv_reusable
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

DONE = b"data: [DONE]\n\n"


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
    prefills_here = endpoint.role == "pool" or ex.absorber is endpoint
    queued_tokens = ex.parsed.prompt_tokens if prefills_here else 0
    endpoint.outstanding_requests += 1
    endpoint.outstanding_prompt_tokens += queued_tokens
    absorbed_tokens = ex.parsed.prompt_tokens if ex.absorber is endpoint else 0
    endpoint.absorbed_prompt_tokens += absorbed_tokens
    resp: aiohttp.ClientResponse | None = None
    complete = False
    try:
        try:
            with StallGuard(timeouts.first_token_s, timeouts.idle_stream_s) as guard:
                resp = await open_stream(
                    router.session,
                    endpoint.url + PATHS[ex.parsed.kind],
                    body,
                    ex.leg_headers(),
                    guard,
                    client_timeout=router.client_timeout,
                )
                content_type = resp.headers.get("Content-Type", "application/json")
                if resp.status != 200 or not ex.parsed.stream:
                    guard.touch()
                    raw = await _read_all(resp, endpoint.url)
                    complete = True
                    answer = classify(endpoint.url, resp.status, raw, content_type)
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
        except StallTimeout:
            raise UpstreamFailure(
                f"{endpoint.url}: no first byte within {timeouts.first_token_s:g} s",
                delivered=True,
                timed_out=True,
            ) from None
        if not first or first.startswith(b'data: {"error"'):
            raise UpstreamFailure(
                f"{endpoint.url} ended its stream before the first token: {first[:200]!r}",
                delivered=True,
            )
        endpoint.outstanding_prompt_tokens -= queued_tokens
        endpoint.absorbed_prompt_tokens -= absorbed_tokens
        queued_tokens = absorbed_tokens = 0
        client, complete = await stream_to_client(ex, request, resp, endpoint, first, content_type)
        return client
    finally:
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
    now = last = first_s = loop.time()
    ex.class_metrics.ttft.observe(now - ex.arrival_s)
    account_first_token(ex, now)
    if ex.prefill_done_s is not None:
        ex.router.metrics.kv_handoff.observe(now - ex.prefill_done_s)
    itl = ex.class_metrics.itl
    decodes = endpoint.role == "decode"
    events = first.count(b"data: ")
    tail = first[-len(DONE) :]
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
                if decodes:
                    endpoint.record_gap(now - last)
                last = now
                events += chunk.count(b"data: ")
                tail = (
                    (tail + chunk)[-len(DONE) :] if len(chunk) < len(DONE) else chunk[-len(DONE) :]
                )
    except StallTimeout:
        broken = 504, f"{endpoint.url} sent nothing for {idle_s:g} s"
    complete = broken is None and tail == DONE
    if not complete:
        endpoint.record_failure(loop.time())
        status, message = broken or (502, f"{endpoint.url} ended the stream without [DONE]")
        partial = not tail.endswith(b"\n\n")
        try:
            await client.write(build_sse_error(message, status=status, after_partial_event=partial))
        except (ConnectionError, aiohttp.ClientConnectionError):
            return client, False
        ex.code = status
    else:
        endpoint.record_success()
        ex.code = 200
        tokens = events - 2  # the [DONE] event and the first token's
        if tokens >= 1:
            ex.router.least.observe_tpot((last - first_s) / tokens, last)
    try:
        await client.write_eof()
    except (ConnectionError, aiohttp.ClientConnectionError):
        ex.code = 499
    return client, complete


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
