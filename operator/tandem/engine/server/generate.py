"""``POST /v1/completions`` and ``/v1/chat/completions``: admission, streaming, P/D fields.

I/O (aiohttp). Parsing is ``protocol.py``, bodies are ``responses.py``; this module only
sequences them around the runner.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from aiohttp import web

from tandem.engine.model import EngineRequest, FinishedRequest, RemoteKV
from tandem.engine.server.errors import (
    ApiError,
    bad_request,
    internal_error,
    model_not_found,
    prompt_too_long,
    service_unavailable,
    sse_error_event,
)
from tandem.engine.server.keys import STATE_KEY
from tandem.engine.server.protocol import Kind, ParsedRequest, parse_body
from tandem.engine.server.responses import (
    DONE_EVENT,
    ChunkFormatter,
    build_response,
    usage_dict,
)
from tandem.engine.server.runner import RequestStream
from tandem.engine.server.state import ServerState
from tandem.engine.server.text import eos_position, output_text, request_seed

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


def error_response(err: ApiError) -> web.Response:
    return web.json_response(err.body(), status=err.status)


async def handle_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completion")


async def handle_chat(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat")


def crash(state: ServerState) -> None:
    """The engine dies: fail everything in flight, refuse the rest, tell the process."""
    state.dead = True
    state.runner.fail_all(internal_error("EngineCore encountered an issue. See stack trace"))
    if state.on_crash is not None:
        state.on_crash()


async def _admit(request: web.Request, state: ServerState, kind: Kind) -> ParsedRequest:
    cfg = state.config
    if state.dead:
        raise internal_error("EngineCore encountered an issue. See stack trace")
    if not state.ready:
        raise service_unavailable("The engine is starting up (loading weights)")
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"Invalid JSON body: {exc}") from exc
    parsed = parse_body(kind, body, cfg.engine.block_size)
    if parsed.model is not None and parsed.model not in cfg.served_model_names:
        raise model_not_found(parsed.model)
    if parsed.prompt_tokens >= cfg.engine.max_model_len:
        raise prompt_too_long(cfg.engine.max_model_len, parsed.prompt_tokens)
    fault = state.draw_fault()
    if fault == "crash":
        crash(state)
        raise internal_error("EngineCore encountered an issue. See stack trace")
    if fault == "error":
        status = cfg.faults.error_status
        names = {429: "RateLimitError", 503: "ServiceUnavailableError"}
        raise ApiError(status, "Injected fault", names.get(status, "InternalServerError"))
    if fault == "hang":
        await asyncio.Event().wait()  # until the client goes away and the handler is cancelled
    engine = state.engine
    if cfg.max_num_queued_reqs is not None and engine.num_waiting >= cfg.max_num_queued_reqs:
        state.metrics.on_rejected("max_num_queued_reqs")
        raise service_unavailable(
            f"Too many queued requests ({engine.num_waiting} >= max_num_queued_reqs="
            f"{cfg.max_num_queued_reqs})"
        )
    if cfg.max_num_queued_tokens is not None:
        queued = engine.waiting_prompt_tokens
        if queued + parsed.prompt_tokens > cfg.max_num_queued_tokens:
            state.metrics.on_rejected("max_num_queued_tokens")
            raise service_unavailable(
                f"Too many queued prompt tokens ({queued} + {parsed.prompt_tokens} > "
                f"max_num_queued_tokens={cfg.max_num_queued_tokens})"
            )
    return parsed


def _engine_request(
    state: ServerState, parsed: ParsedRequest, request_id: str, seed: int
) -> tuple[EngineRequest, dict[str, Any] | None]:
    cfg = state.config
    limit = cfg.engine.max_model_len - parsed.prompt_tokens
    max_tokens = min(parsed.max_tokens or limit, limit)
    stop_after = None if parsed.ignore_eos else eos_position(seed, cfg.eos_mean_tokens)
    kv = parsed.kv_transfer_params or {}
    hold = cfg.role == "prefill" and bool(kv.get("do_remote_decode"))
    remote = None
    pull_params = None
    if cfg.role == "decode" and kv.get("do_remote_prefill"):
        num = kv.get("remote_num_tokens")
        num_tokens = num if isinstance(num, int) and num > 0 else parsed.prompt_tokens
        remote = RemoteKV(num_tokens=num_tokens)
        pull_params = dict(kv)
    hashes = parsed.block_hashes if cfg.engine.enable_prefix_caching else ()
    req = EngineRequest(
        request_id,
        parsed.prompt_tokens,
        max_tokens,
        parsed.priority,
        stop_after,
        hashes,
        hold,
        remote,
    )
    return req, pull_params


def _kv_params_out(request: web.Request, state: ServerState, fin: FinishedRequest) -> Any:
    """Prefill role: what a decode engine needs to pull this request's KV."""
    if not fin.kv_held:
        return None
    held = state.engine.held_kv(fin.request_id)
    if held is None:
        return None
    host, port = state.local_address(request)
    total = state.engine.config.num_gpu_blocks
    base = state.next_block_id
    state.next_block_id = (base + held.num_blocks) % total
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [[(base + i) % total for i in range(held.num_blocks)]],
        "remote_engine_id": state.config.engine_id,
        "remote_request_id": fin.request_id,
        "remote_host": host,
        "remote_port": port,
        "tp_size": state.config.cost.tensor_parallel,
        "dcp_size": 1,
        "pp_size": 1,
        "remote_num_tokens": held.num_tokens,
        "remote_blocks_expiry_time": state.clock.unix_time_at(held.expiry_s),
        "remote_registration_generation": 0,
        "transfer_mode": "pull",
    }


async def _generate(request: web.Request, kind: Kind) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    try:
        parsed = await _admit(request, state, kind)
    except ApiError as err:
        return error_response(err)
    external_id = request.headers.get("X-Request-Id") or parsed.request_id or uuid.uuid4().hex
    runner = state.runner
    internal_id = runner.unique_id(external_id)
    seed = request_seed(parsed.seed, parsed.prompt_key)
    req, pull_params = _engine_request(state, parsed, internal_id, seed)
    try:
        stream = runner.submit(req, pull_params)
    except ValueError as exc:
        return error_response(bad_request(str(exc)))
    prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
    model_name = parsed.model or state.config.served_model_names[0]
    fmt = ChunkFormatter(kind, prefix + external_id, int(time.time()), model_name)
    try:
        if parsed.stream:
            return await _stream(request, state, parsed, stream, fmt, seed)
        return await _complete(request, state, parsed, stream, fmt, seed)
    finally:
        if not stream.done:
            runner.abort(internal_id)


async def _wait_done(stream: RequestStream) -> None:
    while not stream.done:
        stream.event.clear()
        if stream.done:
            return
        await stream.event.wait()


async def _complete(
    request: web.Request,
    state: ServerState,
    parsed: ParsedRequest,
    stream: RequestStream,
    fmt: ChunkFormatter,
    seed: int,
) -> web.StreamResponse:
    await _wait_done(stream)
    fin = stream.finished
    if stream.error is not None or fin is None or fin.finish_reason in ("error", "abort"):
        return error_response(stream.error or internal_error())
    body = build_response(
        parsed.kind,
        fmt.response_id,
        fmt.created,
        fmt.model,
        output_text(seed, 0, fin.output_tokens),
        fin.finish_reason,
        usage_dict(fin.prompt_tokens, fin.output_tokens, fin.cached_tokens),
        _kv_params_out(request, state, fin),
    )
    return web.json_response(body)


async def _stream(
    request: web.Request,
    state: ServerState,
    parsed: ParsedRequest,
    stream: RequestStream,
    fmt: ChunkFormatter,
    seed: int,
) -> web.StreamResponse:
    resp = web.StreamResponse(headers=SSE_HEADERS)
    await resp.prepare(request)
    try:
        if parsed.kind == "chat":
            await resp.write(fmt.role_chunk())
        await _stream_tokens(request, state, parsed, stream, fmt, seed, resp)
        await resp.write(DONE_EVENT)
        await resp.write_eof()
    except ConnectionResetError:
        pass
    return resp


async def _stream_tokens(
    request: web.Request,
    state: ServerState,
    parsed: ParsedRequest,
    stream: RequestStream,
    fmt: ChunkFormatter,
    seed: int,
    resp: web.StreamResponse,
) -> None:
    sent = 0
    continuous = parsed.continuous_usage
    prompt = parsed.prompt_tokens
    while True:
        stream.event.clear()
        n = stream.emitted
        fin = stream.finished
        if stream.error is not None or (
            fin is not None and fin.finish_reason in ("error", "abort")
        ):
            await resp.write(sse_error_event(stream.error or internal_error()))
            return
        if fin is not None:
            usage = usage_dict(prompt, n, fin.cached_tokens) if continuous else None
            kv = _kv_params_out(request, state, fin)
            await resp.write(
                fmt.full_chunk(output_text(seed, sent, n), fin.finish_reason, usage, kv)
            )
            if parsed.include_usage:
                await resp.write(fmt.usage_chunk(usage_dict(prompt, n, fin.cached_tokens)))
            return
        if n > sent:
            text = output_text(seed, sent, n)
            if continuous:
                await resp.write(fmt.full_chunk(text, None, usage_dict(prompt, n, None)))
            else:
                await resp.write(fmt.token_chunk(text))
            sent = n
            continue
        await stream.event.wait()
