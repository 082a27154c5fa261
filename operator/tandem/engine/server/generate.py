"""``POST /v1/completions`` and ``/v1/chat/completions``: admission, choices, streaming,
P/D fields.

I/O (aiohttp). Parsing is ``protocol.py``, a choice's text ``choice.py``, bodies
``responses.py``; this module only sequences them around the runner. A request has one
choice per (prompt, sample): ``n`` samples of each prompt of a completions prompt list,
choice ``index`` = prompt index x n + sample, each one engine request.
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tandem.engine.model import EngineRequest, FinishedRequest, RemoteKV
from tandem.engine.server.choice import ChoiceText, json_tokens
from tandem.engine.server.errors import (
    ApiError,
    internal_error,
    invalid_json,
    model_not_found,
    prompt_too_long,
    service_unavailable,
    sse_error_event,
)
from tandem.engine.server.keys import STATE_KEY
from tandem.engine.server.protocol import Kind, ParsedRequest, Prompt, check_sampling, parse_body
from tandem.engine.server.responses import (
    DONE_EVENT,
    ChunkFormatter,
    build_response,
    chat_choice,
    chat_logprobs,
    completion_choice,
    completion_logprobs,
    merge_logprobs,
    prompt_logprobs,
    usage_dict,
)
from tandem.engine.server.runner import RequestStream
from tandem.engine.server.state import ServerState
from tandem.engine.server.text import choice_seed, eos_position

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
#: what vLLM 0.32 answers a request that arrives while it drains after SIGTERM
DRAINING_MESSAGE = "cannot schedule new futures after shutdown"


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


async def read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise invalid_json(exc.pos, exc.msg) from exc
    except UnicodeDecodeError as exc:
        raise invalid_json(exc.start, "Invalid UTF-8") from exc


def check_serving(state: ServerState) -> None:
    """Refuse every request of a dead, starting or draining engine, as vLLM does."""
    if state.dead:
        raise internal_error("EngineCore encountered an issue. See stack trace")
    if not state.ready:
        raise service_unavailable("The engine is starting up (loading weights)")
    if state.draining:
        raise internal_error(DRAINING_MESSAGE)


async def _admit(request: web.Request, state: ServerState, kind: Kind) -> ParsedRequest:
    check_serving(state)
    parsed = parse_body(kind, await read_json(request), state.config.engine.block_size)
    await admit(state, parsed)
    return parsed


async def admit(state: ServerState, parsed: ParsedRequest) -> None:
    """After parsing: the model, the prompt's length, the sampling checks, injected
    faults and the queue limits, in vLLM's order; raises ApiError."""
    try:
        await _check(state, parsed)
    except BaseException:
        # refused (or abandoned) before it reached the engine: a decode engine frees the
        # prefill engine's KV the request names, as vLLM's serving layer does
        state.runner.release_remote(parsed.kv_transfer_params)
        raise


async def _check(state: ServerState, parsed: ParsedRequest) -> None:
    cfg = state.config
    if parsed.model is not None and parsed.model not in cfg.served_model_names:
        raise model_not_found(parsed.model)
    if parsed.prompt_tokens >= cfg.engine.max_model_len:
        raise prompt_too_long(cfg.engine.max_model_len, parsed.prompt_tokens)
    check_sampling(parsed, cfg.engine.max_model_len)
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
        wanted = sum(p.tokens for p in parsed.prompts) * parsed.n
        if queued + wanted > cfg.max_num_queued_tokens:
            state.metrics.on_rejected("max_num_queued_tokens")
            raise service_unavailable(
                f"Too many queued prompt tokens ({queued} + {wanted} > "
                f"max_num_queued_tokens={cfg.max_num_queued_tokens})"
            )


@dataclass
class Choice:
    """One choice of a request, and how much of it a stream has sent."""

    index: int
    prompt: Prompt
    text: ChoiceText
    stream: RequestStream
    sent_tokens: int = 0
    sent_chars: int = 0
    closed: bool = False

    def stop_reason(self, fin: FinishedRequest) -> str | None:
        text = self.text
        if fin.finish_reason == "stop" and text.stop_reason and fin.output_tokens == text.stop_at:
            return text.stop_reason
        return None


def engine_request(
    state: ServerState,
    parsed: ParsedRequest,
    prompt: Prompt,
    request_id: str,
    text: ChoiceText,
    limit: int,
    remote_allowed: bool,
) -> tuple[EngineRequest, dict[str, Any] | None]:
    cfg = state.config
    eos = None if parsed.ignore_eos else eos_position(text.seed, cfg.eos_mean_tokens)
    ends = [e for e in (eos, text.stop_at) if e is not None]
    kv = parsed.kv_transfer_params or {}
    hold = cfg.role == "prefill" and bool(kv.get("do_remote_decode")) and remote_allowed
    remote = None
    pull_params = None
    if cfg.role == "decode" and kv.get("do_remote_prefill") and remote_allowed:
        num = kv.get("remote_num_tokens")
        num_tokens = num if isinstance(num, int) and num > 0 else prompt.tokens
        remote = RemoteKV(num_tokens=num_tokens)
        pull_params = dict(kv)
    hashes = prompt.block_hashes if cfg.engine.enable_prefix_caching else ()
    req = EngineRequest(
        request_id,
        prompt.tokens,
        limit,
        parsed.priority,
        min(ends) if ends else None,
        hashes,
        hold,
        remote,
    )
    return req, pull_params


def kv_params_out(request: web.Request, state: ServerState, fin: FinishedRequest) -> Any:
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


async def pass_frontend(state: ServerState) -> None:
    """Hold a request for the measured engine's front end (its HTTP, API server and
    hand-over to the engine loop: a preset's ``frontend``) before the engine sees it."""
    if state.config.frontend_latency_s > 0:
        await asyncio.sleep(state.config.frontend_latency_s / state.config.speedup)


def submit_choices(
    state: ServerState, parsed: ParsedRequest, response_id: str, event: asyncio.Event
) -> list[Choice]:
    """One engine request per choice. Internal ids as vLLM's (``cmpl-<id>-<i>-<8 hex>``,
    ``chatcmpl-<id>-<8 hex>``): a prefill engine advertises them as ``remote_request_id``."""
    cfg = state.config
    runner = state.runner
    fresh: random.Random = state.output_rng
    choices: list[Choice] = []
    for p, prompt in enumerate(parsed.prompts):
        room = cfg.engine.max_model_len - prompt.tokens
        limit = min(parsed.max_tokens or room, room)
        for i in range(parsed.n):
            index = p * parsed.n + i
            seed = choice_seed(parsed.seed, parsed.greedy, prompt.key, i, fresh)
            forced = None if parsed.json_schema is None else json_tokens(parsed.json_schema, seed)
            text = ChoiceText(seed, limit, parsed.stop, forced)
            suffix = secrets.token_hex(4)
            if parsed.kind == "completion" or parsed.n > 1:
                internal_id = runner.unique_id(f"{response_id}-{index}-{suffix}")
            else:
                internal_id = runner.unique_id(f"{response_id}-{suffix}")
            req, pull = engine_request(state, parsed, prompt, internal_id, text, limit, index == 0)
            stream = runner.submit(req, pull, event)
            choices.append(Choice(index, prompt, text, stream))
    return choices


async def _generate(request: web.Request, kind: Kind) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    try:
        parsed = await _admit(request, state, kind)
    except ApiError as err:
        return error_response(err)
    external_id = request.headers.get("X-Request-Id") or parsed.request_id or secrets.token_hex(8)
    prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
    model_name = parsed.model or state.config.served_model_names[0]
    fmt = ChunkFormatter(kind, prefix + external_id, int(time.time()), model_name)
    event = asyncio.Event()
    await pass_frontend(state)
    try:
        choices = submit_choices(state, parsed, fmt.response_id, event)
    except ValueError as exc:
        state.runner.release_remote(parsed.kv_transfer_params)
        return error_response(ApiError(400, str(exc), "BadRequestError"))
    try:
        if parsed.stream:
            return await _stream(request, state, parsed, choices, fmt, event)
        return await _complete(request, state, parsed, choices, fmt, event)
    finally:
        for choice in choices:
            if not choice.stream.done:
                state.runner.abort(choice.stream.request_id)


def failed(stream: RequestStream) -> ApiError | None:
    fin = stream.finished
    if stream.error is not None:
        return stream.error
    if fin is not None and fin.finish_reason in ("error", "abort"):
        return internal_error()
    return None


def usage_of(choices: list[Choice], emitted: dict[int, int], cached: int) -> dict[str, Any]:
    seen: dict[int, int] = {}
    for c in choices:
        seen.setdefault(id(c.prompt), c.prompt.tokens)
    return usage_dict(sum(seen.values()), sum(emitted.values()), cached)


def _prompt_pieces(prompt: Prompt) -> list[str]:
    """The sim's prompt tokens for ``echo`` + ``logprobs``: four characters each."""
    text, n = prompt.text, max(1, prompt.tokens)
    return [text[i * 4 : (i + 1) * 4] for i in range(n - 1)] + [text[(n - 1) * 4 :]]


def _choice_logprobs(parsed: ParsedRequest, choice: Choice, start: int, stop: int) -> Any:
    k = parsed.logprobs
    if k is None:
        return None
    if parsed.kind == "chat":
        return chat_logprobs(choice.text, start, stop, k, parsed.greedy)
    if not parsed.echo:
        return completion_logprobs(choice.text, start, stop, k, parsed.greedy)
    offset = len(choice.prompt.text)
    out = completion_logprobs(choice.text, start, stop, k, parsed.greedy, offset)
    if start == 0:
        out = merge_logprobs(prompt_logprobs(_prompt_pieces(choice.prompt)), out)
    return out


async def wait_all(choices: list[Choice], event: asyncio.Event) -> None:
    while not all(c.stream.done for c in choices):
        event.clear()
        if all(c.stream.done for c in choices):
            return
        await event.wait()


async def _complete(
    request: web.Request,
    state: ServerState,
    parsed: ParsedRequest,
    choices: list[Choice],
    fmt: ChunkFormatter,
    event: asyncio.Event,
) -> web.StreamResponse:
    await wait_all(choices, event)
    bodies = []
    emitted: dict[int, int] = {}
    cached = 0
    kv = None
    for choice in choices:
        err = failed(choice.stream)
        fin = choice.stream.finished
        if err is not None or fin is None:
            return error_response(err or internal_error())
        text = choice.text.text(fin.output_tokens)
        if parsed.echo:
            text = choice.prompt.text + text
        logprobs = _choice_logprobs(parsed, choice, 0, fin.output_tokens)
        build = chat_choice if parsed.kind == "chat" else completion_choice
        bodies.append(build(choice.index, text, fin.finish_reason, choice.stop_reason(fin),
                            logprobs))  # fmt: skip
        emitted[choice.index] = fin.output_tokens
        cached += fin.cached_tokens
        if choice.index == 0:
            kv = kv_params_out(request, state, fin)
    usage = usage_of(choices, emitted, cached)
    body = build_response(parsed.kind, fmt.response_id, fmt.created, fmt.model, bodies, usage, kv)
    return web.json_response(body)


async def _stream(
    request: web.Request,
    state: ServerState,
    parsed: ParsedRequest,
    choices: list[Choice],
    fmt: ChunkFormatter,
    event: asyncio.Event,
) -> web.StreamResponse:
    resp = web.StreamResponse(headers=SSE_HEADERS)
    await resp.prepare(request)
    try:
        if parsed.kind == "chat":
            for choice in choices:
                await resp.write(fmt.role_chunk(choice.index))
        await _stream_tokens(request, state, parsed, choices, fmt, event, resp)
        await resp.write(DONE_EVENT)
        await resp.write_eof()
    except ConnectionResetError:
        pass
    return resp


def new_text(parsed: ParsedRequest, choice: Choice, n: int, finished: bool) -> str:
    """Text of the choice not yet sent, after ``n`` tokens (``echo``: the prompt first)."""
    text = choice.text
    if text.stops:
        shown = text.shown(n, finished)
        new = shown[choice.sent_chars :]
        choice.sent_chars = max(choice.sent_chars, len(shown))
    else:
        new = text.span(choice.sent_tokens, n)
    if parsed.echo and choice.sent_tokens == 0 and (new or finished):
        new = choice.prompt.text + new
    return new


async def _stream_tokens(
    request: web.Request,
    state: ServerState,
    parsed: ParsedRequest,
    choices: list[Choice],
    fmt: ChunkFormatter,
    event: asyncio.Event,
    resp: web.StreamResponse,
) -> None:
    continuous = parsed.continuous_usage
    emitted: dict[int, int] = {}
    cached = 0
    while True:
        event.clear()
        for choice in choices:
            if choice.closed:
                continue
            stream = choice.stream
            err = failed(stream)
            if err is not None:
                await resp.write(sse_error_event(err))
                return
            n, fin = stream.emitted, stream.finished
            if fin is not None:
                n = fin.output_tokens
                emitted[choice.index] = n
                cached += fin.cached_tokens
                usage = usage_of(choices, emitted, cached) if continuous else None
                kv = kv_params_out(request, state, fin) if choice.index == 0 else None
                text = new_text(parsed, choice, n, True)
                logprobs = _choice_logprobs(parsed, choice, choice.sent_tokens, n)
                await resp.write(
                    fmt.full_chunk(text, fin.finish_reason, usage, kv, index=choice.index,
                                   stop_reason=choice.stop_reason(fin), logprobs=logprobs)
                )  # fmt: skip
                choice.sent_tokens = n
                choice.closed = True
            elif n > choice.sent_tokens:
                text = new_text(parsed, choice, n, False)
                logprobs = _choice_logprobs(parsed, choice, choice.sent_tokens, n)
                if continuous:
                    emitted[choice.index] = n
                    usage = usage_of(choices, emitted, 0)
                    await resp.write(fmt.full_chunk(text, None, usage, index=choice.index,
                                                    logprobs=logprobs))  # fmt: skip
                elif text or logprobs is not None:
                    await resp.write(fmt.token_chunk(text, choice.index, logprobs))
                choice.sent_tokens = n
        if all(c.closed for c in choices):
            if parsed.include_usage:
                await resp.write(fmt.usage_chunk(usage_of(choices, emitted, cached)))
            return
        await event.wait()
