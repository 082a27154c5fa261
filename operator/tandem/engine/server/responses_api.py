"""``POST /v1/responses`` on the simulated engine, and the stored-response routes. I/O (aiohttp).

A Responses request runs through the same admission and engine requests as a chat
request (:mod:`tandem.engine.server.generate`), P/D fields included: a prefill engine
holds the KV of a ``kv_transfer_params: {do_remote_decode: true}`` request and returns the
parameters to pull it in the response's ``kv_transfer_params``; a decode engine given
them pulls. Only the shapes differ (:mod:`tandem.engine.server.responses_protocol`).
Nothing is stored (vLLM's default), so ``GET /v1/responses/{id}`` and its ``cancel``
answer vLLM's 404.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

from aiohttp import web

from tandem.engine.server.errors import ApiError, internal_error, model_not_found
from tandem.engine.server.generate import (
    SSE_HEADERS,
    Choice,
    admit,
    check_serving,
    error_response,
    failed,
    kv_params_out,
    new_text,
    pass_frontend,
    read_json,
    submit_choices,
    wait_all,
)
from tandem.engine.server.keys import STATE_KEY
from tandem.engine.server.protocol import ParsedRequest
from tandem.engine.server.responses_protocol import (
    ResponseEvents,
    check_stateless,
    parse_responses,
    response_not_found,
    usage_of,
)
from tandem.engine.server.state import ServerState


async def handle_responses(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    try:
        check_serving(state)
        body = await read_json(request)
        fresh_id = f"resp_{secrets.token_hex(8)}"
        parsed, echo = parse_responses(body, state.config.engine.block_size, fresh_id)
        if parsed.model is not None and parsed.model not in state.config.served_model_names:
            raise model_not_found(parsed.model)
        check_stateless(echo)
        await admit(state, parsed)
    except ApiError as err:
        return error_response(err)
    cfg = state.config
    model = parsed.model or cfg.served_model_names[0]
    room = cfg.engine.max_model_len - parsed.prompt_tokens
    limit = min(parsed.max_tokens or room, room)
    events = ResponseEvents(echo, model, int(time.time()), limit, f"msg_{secrets.token_hex(8)}")
    event = asyncio.Event()
    assert parsed.request_id is not None
    await pass_frontend(state)
    try:
        (choice,) = submit_choices(state, parsed, parsed.request_id, event)
    except ValueError as exc:
        state.runner.release_remote(parsed.kv_transfer_params)
        return error_response(ApiError(400, str(exc), "BadRequestError"))
    try:
        if parsed.stream:
            return await _stream(request, state, parsed, choice, events, event)
        return await _complete(request, state, choice, events, event)
    finally:
        if not choice.stream.done:
            state.runner.abort(choice.stream.request_id)


def _final(
    request: web.Request, state: ServerState, choice: Choice, events: ResponseEvents
) -> dict[str, Any]:
    fin = choice.stream.finished
    assert fin is not None
    usage = usage_of(choice.prompt.tokens, fin.output_tokens, fin.cached_tokens)
    return events.response(
        text=choice.text.text(fin.output_tokens),
        finish_reason=fin.finish_reason,
        usage=usage,
        kv_transfer_params=kv_params_out(request, state, fin),
    )


async def _complete(
    request: web.Request,
    state: ServerState,
    choice: Choice,
    events: ResponseEvents,
    event: asyncio.Event,
) -> web.StreamResponse:
    await wait_all([choice], event)
    err = failed(choice.stream)
    if err is not None or choice.stream.finished is None:
        return error_response(err or internal_error())
    return web.json_response(_final(request, state, choice, events))


async def _stream(
    request: web.Request,
    state: ServerState,
    parsed: ParsedRequest,
    choice: Choice,
    events: ResponseEvents,
    event: asyncio.Event,
) -> web.StreamResponse:
    resp = web.StreamResponse(headers=SSE_HEADERS)
    await resp.prepare(request)
    try:
        await resp.write(events.opening())
        while True:
            event.clear()
            stream = choice.stream
            err = failed(stream)
            if err is not None:
                await resp.write(events.frame("error", {"error": err.body()["error"]}))
                break
            fin = stream.finished
            n = fin.output_tokens if fin is not None else stream.emitted
            if n > choice.sent_tokens or fin is not None:
                text = new_text(parsed, choice, n, fin is not None)
                choice.sent_tokens = n
                if text:
                    await resp.write(events.delta(text))
            if fin is not None:
                await resp.write(events.closing(_final(request, state, choice, events)))
                break
            await event.wait()
        await resp.write_eof()
    except ConnectionResetError:
        pass
    return resp


async def handle_stored_response(request: web.Request) -> web.Response:
    """``GET /v1/responses/{id}`` and ``POST /v1/responses/{id}/cancel``: nothing is
    stored, so vLLM's 404 for an unknown id."""
    return error_response(response_not_found(request.match_info["response_id"]))
